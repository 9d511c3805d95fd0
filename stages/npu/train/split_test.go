package train_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// TestSemiAutoStageEqualsStandAlone runs the real npu/train stage in
// semi_auto_parallel on 4 rank processes with the seeds' MatMul strategy
// (fc.weight split in two along its second dimension, repeated twice) and
// compares with stand_alone on the same global batch of 16:
//   - integrated_save (the default) has rank 0 write whole tensors, which
//     agree with stand_alone's within float32 rounding;
//   - integrated_save: false has each rank write its slices, laid out as
//     the strategy file rank 0 wrote says; put back together they are the
//     integrated checkpoint's bytes;
//   - auto_parallel runs the strategy its search chose and agrees too.
func TestSemiAutoStageEqualsStandAlone(t *testing.T) {
	dataDir := synthData(t, 16) // 80 images: 5 steps of 16
	base := map[string]any{"model": "semi_auto_net", "batch_size": 4}
	with := func(extra map[string]any) map[string]any {
		w := withBlock(dataDir, base)
		for k, v := range extra {
			w[k] = v
		}
		return w
	}
	aloneDir := t.TempDir()
	mustRun(t, aloneDir, 1, with(map[string]any{"mode": "stand_alone", "batch_size": 16}))
	want := readTensors(t, lastCheckpoint(t, aloneDir, 0))
	if w := want["fc.weight"]; fmt.Sprint(w.Dims) != "[3072 128]" {
		t.Fatalf("stand_alone fc.weight %v, want [3072 128]", w.Dims)
	}

	strategy := map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}
	wholeDir := t.TempDir()
	r := mustRun(t, wholeDir, 4, with(map[string]any{"mode": "semi_auto_parallel", "strategy": strategy}))
	integrated := readTensors(t, lastCheckpoint(t, wholeDir, 0))
	t.Logf("semi_auto_parallel, integrated: largest relative difference from stand_alone %.3g", compareTensors(t, integrated, want, nil))
	if sf, _ := r.outputs["strategy"].(string); sf != filepath.Join(wholeDir, "strategy.ckpt") {
		t.Errorf("strategy output %q", r.outputs["strategy"])
	}

	slicedDir := t.TempDir()
	r = mustRun(t, slicedDir, 4, with(map[string]any{"mode": "semi_auto_parallel", "strategy": strategy, "integrated_save": false, "strategy_ckpt_save_file": "strategy.json"}))
	sf, err := parallel.ReadStrategyFile(r.outputs["strategy"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if got := sf.Operators["fc.matmul"]; fmt.Sprint(got) != "[[1 1] [1 2]]" {
		t.Errorf("strategy file: fc.matmul %v", got)
	}
	layout, ok := sf.Layouts["fc.weight"]
	if !ok {
		t.Fatalf("strategy file has no layout of fc.weight: %v", sf.Layouts)
	}
	boxes, err := layout.Boxes([]int{3072, 128})
	if err != nil {
		t.Fatal(err)
	}
	whole := make([]float32, 3072*128)
	for rank := 0; rank < 4; rank++ {
		slice := readTensors(t, lastCheckpoint(t, slicedDir, rank))
		w := slice["fc.weight"]
		if fmt.Sprint(w.Dims) != "[3072 64]" || !slices.Equal(boxes[rank].Shape, []int{3072, 64}) {
			t.Fatalf("rank %d: fc.weight slice %v, box %+v, want [3072 64]", rank, w.Dims, boxes[rank])
		}
		v, _ := w.Float32s()
		for row := 0; row < 3072; row++ {
			copy(whole[row*128+boxes[rank].Offset[1]:], v[row*64:(row+1)*64])
		}
		if m := slice["moments.fc.weight"]; fmt.Sprint(m.Dims) != "[3072 64]" {
			t.Errorf("rank %d: moments.fc.weight %v, want the slice's shape", rank, m.Dims)
		}
	}
	merged, _ := ckpt.NewFloat32("fc.weight", []int64{3072, 128}, whole)
	if !bytes.Equal(merged.Data, integrated["fc.weight"].Data) {
		t.Errorf("the four slices put together differ from the integrated fc.weight")
	}

	autoDir := t.TempDir()
	r = mustRun(t, autoDir, 4, with(map[string]any{"mode": "auto_parallel"}))
	t.Logf("auto_parallel: largest relative difference from stand_alone %.3g", compareTensors(t, readTensors(t, lastCheckpoint(t, autoDir, 0)), want, nil))
	chose := strings.Join(r.logs(), "\n")
	if !strings.Contains(chose, "auto_parallel chose") || !strings.Contains(chose, "fc.matmul") {
		t.Errorf("the stage did not report auto_parallel's plan:\n%s", chose)
	}
}

// TestWideNetFitsOnlySplit is the reason to shard a model: wide_net (a
// 3072×4096 layer; weights, gradients and moments about 150 MiB) fails
// with out-of-memory on one 128 MiB device, naming the buffer, and trains
// under the same cap in semi_auto_parallel on 8 devices with that layer
// split 8 ways; every rank's peak stays under the cap.
func TestWideNetFitsOnlySplit(t *testing.T) {
	dataDir := synthData(t, 16) // 80 images: 5 steps of 16
	with := func(extra map[string]any) map[string]any {
		w := withBlock(dataDir, map[string]any{"model": "wide_net", "device_memory": "128MiB"})
		for k, v := range extra {
			w[k] = v
		}
		return w
	}
	r := runStage(context.Background(), t.TempDir(), 1, 1, with(map[string]any{"mode": "stand_alone", "batch_size": 16}))
	if r.err == nil || !strings.Contains(r.err.Error(), "out of device memory") {
		t.Fatalf("stand_alone under 128MiB: %v, want out of device memory", r.err)
	}
	t.Logf("stand_alone: %v", r.err)

	dir := t.TempDir()
	r = mustRun(t, dir, 8, with(map[string]any{"mode": "semi_auto_parallel", "batch_size": 2,
		"strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 8}}}, "integrated_save": false}))
	if fmt.Sprint(r.outputs["global_step"]) != "5" {
		t.Errorf("global_step %v, want 5", r.outputs["global_step"])
	}
	peak, _ := r.outputs["peak_device_memory"].(int64)
	if peak <= 0 || peak > 128<<20 {
		t.Errorf("peak device memory %v, want under the 128 MiB cap", r.outputs["peak_device_memory"])
	}
	if w := readTensors(t, lastCheckpoint(t, dir, 5))["fc.weight"]; fmt.Sprint(w.Dims) != "[3072 512]" {
		t.Errorf("rank 5's fc.weight slice %v, want [3072 512]", w.Dims)
	}
	t.Logf("semi_auto_parallel on 8 devices: peak %d bytes per device", peak)
}

// TestRetriedSplitStageResumes kills rank 1 of a 2-device semi_auto_parallel
// job after its step-12 line: rank 0 has written the integrated checkpoint
// of step 10 (integrated_save, MindSpore's default: rank 0 writes whole
// tensors, rank 1 none). Attempt 2 must resume every rank from rank 0's
// checkpoint, each cutting its own slice of the whole tensors, and end with
// the bits of an uninterrupted run.
func TestRetriedSplitStageResumes(t *testing.T) {
	dataDir := synthData(t, 24) // 120 images: 15 steps of 8 per epoch
	with := withBlock(dataDir, map[string]any{
		"mode": "semi_auto_parallel", "model": "semi_auto_net", "epochs": 2, "save_checkpoint_steps": 5, "log_steps": 1,
		"strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}, "collective_timeout": "10s",
	})
	whole := t.TempDir()
	mustRun(t, whole, 2, with)
	want := readTensors(t, lastCheckpoint(t, whole, 0))

	jobDir := t.TempDir()
	t.Setenv(crashAtEnv, "epoch: 1 step: 12,")
	first := runStage(t.Context(), jobDir, 2, 1, with)
	os.Unsetenv(crashAtEnv)
	if first.err == nil {
		t.Fatal("attempt 1 succeeded, but a rank was killed at step 12")
	}
	if left := filepath.Base(lastCheckpoint(t, jobDir, 0)); left != "CKP-1_10.ckpt" {
		t.Fatalf("attempt 1 left %s on rank 0, want CKP-1_10.ckpt", left)
	}
	second := runStage(t.Context(), jobDir, 2, 2, with)
	if second.err != nil {
		t.Fatalf("attempt 2: %v", second.err)
	}
	for r := 0; r < 2; r++ {
		if from := filepath.Base(workerResult(t, jobDir, r).ResumedFrom); from != "CKP-1_10.ckpt" {
			t.Errorf("rank %d resumed from %q, want rank 0's CKP-1_10.ckpt", r, workerResult(t, jobDir, r).ResumedFrom)
		}
	}
	got := readTensors(t, lastCheckpoint(t, jobDir, 0))
	if len(got) != len(want) {
		t.Errorf("%d tensors after the retry, %d uninterrupted", len(got), len(want))
	}
	for _, name := range sortedNames(want) {
		if !bytes.Equal(got[name].Data, want[name].Data) {
			t.Errorf("%s differs from the uninterrupted run's (resuming must be bit-identical)", name)
		}
	}
}
