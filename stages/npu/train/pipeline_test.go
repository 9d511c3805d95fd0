package train_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
)

// assembleStages puts the checkpoints of a pipeline job's ranks back
// together: every rank saved its stage's slices, laid out as its stage's
// strategy file says (moments as their parameters). It returns whole
// tensors of parameters and moments, and checks that no two stages saved
// the same parameter.
func assembleStages(t *testing.T, jobDir string, devices, stages int, strategyFile string) map[string]ckpt.Tensor {
	t.Helper()
	per := devices / stages
	whole := map[string][]float32{}
	dims := map[string][]int64{}
	owner := map[string]int{}
	for s := range stages {
		sf, err := parallel.ReadStrategyFile(job.StageStrategyFile(filepath.Join(jobDir, strategyFile), s))
		if err != nil {
			t.Fatal(err)
		}
		if sf.CurrentStage != s {
			t.Errorf("stage %d's strategy file says current_stage %d", s, sf.CurrentStage)
		}
		for i := range per {
			rank := s*per + i
			for name, tensor := range readTensors(t, lastCheckpoint(t, jobDir, rank)) {
				if !isParameter(name) && !strings.HasPrefix(name, "moments.") {
					continue
				}
				if o, ok := owner[name]; ok && o != s {
					t.Fatalf("%s saved by stages %d and %d", name, o, s)
				}
				owner[name] = s
				layout, ok := sf.Layouts[strings.TrimPrefix(name, "moments.")]
				if !ok {
					t.Fatalf("stage %d's strategy file has no layout of %s", s, name)
				}
				shape := layout.Shape
				if len(shape) == 0 {
					t.Fatalf("%s: the layout has no tensor shape", name)
				}
				boxes, err := layout.Boxes(shape)
				if err != nil {
					t.Fatal(err)
				}
				v, err := tensor.Float32s()
				if err != nil {
					t.Fatal(err)
				}
				if whole[name] == nil {
					n := 1
					for _, d := range shape {
						n *= d
						dims[name] = append(dims[name], int64(d))
					}
					whole[name] = make([]float32, n)
				}
				b := boxes[i]
				parallel.CopyBox(whole[name], shape, b.Offset, v, b.Shape, nil, b.Shape)
			}
		}
	}
	out := map[string]ckpt.Tensor{}
	for name, v := range whole {
		tt, err := ckpt.NewFloat32(name, dims[name], v)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = tt
	}
	return out
}

// TestPipelineStageEqualsStandAlone runs the real stage with pipeline
// stages on rank processes and compares the assembled stage checkpoints,
// parameters and moments, with stand_alone on the same global batch after
// 10 steps:
//   - 4 devices, 2 stages of 2 (data parallel inside each), 2 micro-batches;
//   - 4 devices, 4 stages of 1, 8 micro-batches of one image;
//   - 8 devices, 2 stages of 2×2 (batch and operators split by the
//     strategy), 4 micro-batches, GPipe.
func TestPipelineStageEqualsStandAlone(t *testing.T) {
	dataDir := synthData(t, 16) // 80 images: 10 steps of 8
	aloneDir := t.TempDir()
	mustRun(t, aloneDir, 1, withBlock(dataDir, map[string]any{"mode": "stand_alone", "batch_size": 8}))
	want := readTensors(t, lastCheckpoint(t, aloneDir, 0))
	keep := func(name string) bool { return isParameter(name) || strings.HasPrefix(name, "moments.") }
	for _, tc := range []struct {
		devices, stages int
		with            map[string]any
	}{
		{4, 2, map[string]any{"mode": "semi_auto_parallel", "batch_size": 4, "pipeline_stages": 2, "micro_size": 2, "eval": true}},
		{4, 4, map[string]any{"mode": "semi_auto_parallel", "batch_size": 8, "pipeline_stages": 4, "micro_size": 8}},
		// Every micro-batch count with each stage count (the batch a rank
		// loads is batch_size × devices/stages, 8 here).
		{2, 2, map[string]any{"mode": "semi_auto_parallel", "batch_size": 8, "pipeline_stages": 2, "micro_size": 1}},
		{2, 2, map[string]any{"mode": "semi_auto_parallel", "batch_size": 8, "pipeline_stages": 2, "micro_size": 8}},
		{4, 2, map[string]any{"mode": "auto_parallel", "batch_size": 4, "pipeline_stages": 2, "micro_size": 4}},
		{4, 4, map[string]any{"mode": "semi_auto_parallel", "batch_size": 8, "pipeline_stages": 4, "micro_size": 1}},
		{4, 4, map[string]any{"mode": "semi_auto_parallel", "batch_size": 8, "pipeline_stages": 4, "micro_size": 2, "pipeline_schedule": "gpipe"}},
		{8, 4, map[string]any{"mode": "semi_auto_parallel", "batch_size": 4, "pipeline_stages": 4, "micro_size": 4}},
		{8, 2, map[string]any{"mode": "semi_auto_parallel", "batch_size": 2, "pipeline_stages": 2, "micro_size": 4, "pipeline_schedule": "gpipe",
			"strategy": map[string]any{
				"conv1":            []any{[]any{2, 1, 1, 1}, []any{2, 1, 1, 1}},
				"conv2":            []any{[]any{2, 1, 1, 1}, []any{2, 1, 1, 1}},
				"end_point.matmul": []any{[]any{2, 2}, []any{1, 2}},
			}}},
	} {
		t.Run(fmt.Sprintf("%d devices %d stages %v micro %v", tc.devices, tc.stages, tc.with["mode"], tc.with["micro_size"]), func(t *testing.T) {
			dir := t.TempDir()
			tc.with["strategy_ckpt_save_file"] = "strategy.json" // the JSON form records tensor shapes
			tc.with["integrated_save"] = false                   // every rank saves its slices
			r := mustRun(t, dir, tc.devices, withBlock(dataDir, tc.with))
			if got := fmt.Sprint(r.outputs["global_step"]); got != "10" {
				t.Errorf("global_step %s, want 10", got)
			}
			got := assembleStages(t, dir, tc.devices, tc.stages, "strategy.json")
			var names []string
			for name := range want {
				if keep(name) {
					names = append(names, name)
				}
			}
			if len(got) != len(names) {
				t.Errorf("the stages saved %d parameters and moments, stand_alone %d", len(got), len(names))
			}
			t.Logf("largest relative difference from stand_alone %.3g", compareTensors(t, got, want, keep))
			// The last stage's loss reaches the lead rank (stage 0), and
			// so do the logits of evaluation.
			if l, _ := r.outputs["loss"].(float64); !(l > 0) {
				t.Errorf("loss output %v", r.outputs["loss"])
			}
			if tc.with["eval"] == true {
				if a, _ := r.outputs["accuracy"].(float64); !(a >= 0 && a <= 1) {
					t.Errorf("accuracy output %v, want one from evaluation", r.outputs["accuracy"])
				}
				t.Logf("accuracy %v", r.outputs["accuracy"])
			}
		})
	}
}

// TestPipelineKilledRankFailsEveryStage kills rank 0 (stage 0) of a
// 2-stage job on 4 devices after its third step: every other rank, in
// its stage group or the other stage, fails naming rank 0, through the
// job's communicator when rank 0 is not its direct peer.
func TestPipelineKilledRankFailsEveryStage(t *testing.T) {
	dataDir := synthData(t, 24)
	jobDir := t.TempDir()
	t.Setenv(crashAtEnv, "epoch: 1 step: 3,")
	r := runStage(t.Context(), jobDir, 4, 1, withBlock(dataDir, map[string]any{
		"mode": "semi_auto_parallel", "epochs": 100, "log_steps": 1, "pipeline_stages": 2, "micro_size": 2,
		"collective_timeout": "6s",
	}))
	os.Unsetenv(crashAtEnv)
	if r.err == nil || !errors.Is(r.err, launch.ErrRankFailed) {
		t.Fatalf("stage returned %v, want a failed rank", r.err)
	}
	for rank := 1; rank < 4; rank++ {
		log, err := os.ReadFile(launch.LogPath(jobDir, rank))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "rank 0 (") || !strings.Contains(string(log), "closed the connection") {
			t.Errorf("train.log%d does not name rank 0 as gone:\n%s", rank, tail(string(log)))
		}
		t.Logf("train.log%d ends: %s", rank, tail(string(log)))
	}
	t.Logf("stage error: %.300s", r.err)
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-5, 0):], "\n")
}

// TestPipelineResumeIsBitIdentical kills rank 0 of a 2-stage job on 4
// devices at step 12 (after step 10's checkpoint) and retries the stage:
// the ranks agree on the step to resume from over the job's communicator,
// each reloads its stage's slices, and every rank's final checkpoint has
// the bytes of an uninterrupted run's.
func TestPipelineResumeIsBitIdentical(t *testing.T) {
	dataDir := synthData(t, 24) // 120 images: 15 steps of 8 per epoch
	with := withBlock(dataDir, map[string]any{
		"mode": "semi_auto_parallel", "epochs": 2, "save_checkpoint_steps": 5, "log_steps": 1,
		"pipeline_stages": 2, "micro_size": 2, "collective_timeout": "10s", "integrated_save": false,
	})
	whole := t.TempDir()
	mustRun(t, whole, 4, with)

	jobDir := t.TempDir()
	t.Setenv(crashAtEnv, "epoch: 1 step: 12,")
	first := runStage(t.Context(), jobDir, 4, 1, with)
	os.Unsetenv(crashAtEnv)
	if first.err == nil {
		t.Fatal("attempt 1 succeeded, but its rank 0 was killed at step 12")
	}
	if second := runStage(t.Context(), jobDir, 4, 2, with); second.err != nil {
		t.Fatalf("attempt 2: %v", second.err)
	}
	for r := range 4 {
		if res := workerResult(t, jobDir, r); res.ResumedFrom == "" {
			t.Errorf("rank %d did not resume", r)
		}
		got, want := readTensors(t, lastCheckpoint(t, jobDir, r)), readTensors(t, lastCheckpoint(t, whole, r))
		if len(got) != len(want) {
			t.Errorf("rank %d: %d tensors, the uninterrupted run's %d", r, len(got), len(want))
		}
		for name, w := range want {
			if !bytes.Equal(got[name].Data, w.Data) {
				t.Errorf("rank %d: %s differs from the uninterrupted run's", r, name)
			}
		}
	}
}

// Pipeline options that cannot run are refused, naming the key, at
// validation when they do not depend on the cluster and at Run on a
// 2-device cluster; a refused job leaves nothing behind.
func TestPipelineRefusals(t *testing.T) {
	dataDir := synthData(t, 4)
	for _, tc := range []struct {
		name, path, what string
		with             map[string]any
		atValidate       bool
	}{
		{"micro_size without stages", "/micro_size", "micro_size is for pipeline parallel",
			map[string]any{"mode": "semi_auto_parallel", "micro_size": 2}, true},
		{"data_parallel", "/pipeline_stages", "pipeline_stages is for modes semi_auto_parallel and auto_parallel",
			map[string]any{"mode": "data_parallel", "pipeline_stages": 2}, true},
		{"too many stages for the model", "/pipeline_stages", "semi_auto_net can be cut into at most 3 pipeline stages (before end_point.matmul, end_point.bias_add), not 4",
			map[string]any{"mode": "semi_auto_parallel", "model": "semi_auto_net", "pipeline_stages": 4}, true},
		{"unknown operator", "/pipeline_stage", `pipeline_stage names "conv3", not an operator of cnn`,
			map[string]any{"mode": "semi_auto_parallel", "pipeline_stages": 2, "pipeline_stage": map[string]any{"conv3": 1}}, true},
		{"grad_accumulation_step", "/grad_accumulation_step", "micro_size splits each step into micro-batches",
			map[string]any{"mode": "semi_auto_parallel", "pipeline_stages": 2, "grad_accumulation_step": 2}, true},
		{"stages do not divide devices", "/pipeline_stages", "4 pipeline stages do not split 2 devices",
			map[string]any{"mode": "semi_auto_parallel", "pipeline_stages": 4}, false},
		{"micro_size does not divide the batch", "/micro_size", "micro_size 3 does not divide the global batch of 4",
			map[string]any{"mode": "semi_auto_parallel", "pipeline_stages": 2, "micro_size": 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := validate(t, withBlock(dataDir, tc.with))
			if tc.atValidate && (len(problems) != 1 || problems[0].Path != tc.path || !strings.Contains(problems[0].Message, tc.what)) {
				t.Errorf("problems %+v, want one at %s saying %s", problems, tc.path, tc.what)
			}
			work := t.TempDir()
			r := runStage(t.Context(), work, 2, 1, withBlock(dataDir, tc.with))
			if r.err == nil || !strings.Contains(r.err.Error(), tc.what) || !strings.Contains(r.err.Error(), tc.path) {
				t.Errorf("Run: %v, want an error at %s saying %s", r.err, tc.path, tc.what)
			}
			if entries, _ := os.ReadDir(work); len(entries) != 0 {
				t.Errorf("a refused job left %d entries in its work dir", len(entries))
			}
		})
	}
}

// TestPipelineIntegratedSave: with integrated_save (the default) the first
// rank of each stage saves its stage's whole tensors, which together equal
// stand_alone's; a retried job resumes every rank from its stage's.
func TestPipelineIntegratedSave(t *testing.T) {
	dataDir := synthData(t, 24) // 120 images: 15 steps of 8 per epoch
	aloneDir := t.TempDir()
	mustRun(t, aloneDir, 1, withBlock(dataDir, map[string]any{"mode": "stand_alone", "batch_size": 8, "epochs": 2}))
	want := readTensors(t, lastCheckpoint(t, aloneDir, 0))
	with := withBlock(dataDir, map[string]any{
		"mode": "semi_auto_parallel", "batch_size": 4, "epochs": 2, "save_checkpoint_steps": 5, "log_steps": 1,
		"pipeline_stages": 2, "micro_size": 2, "collective_timeout": "10s",
		"strategy": map[string]any{"conv2": []any{[]any{1, 1, 1, 1}, []any{2, 1, 1, 1}}},
	})
	jobDir := t.TempDir()
	t.Setenv(crashAtEnv, "epoch: 1 step: 12,")
	first := runStage(t.Context(), jobDir, 4, 1, with)
	os.Unsetenv(crashAtEnv)
	if first.err == nil {
		t.Fatal("attempt 1 succeeded, but its rank 0 was killed at step 12")
	}
	mustRun(t, jobDir, 4, with)
	got := map[string]ckpt.Tensor{}
	for _, lead := range []int{0, 2} {
		for name, tt := range readTensors(t, lastCheckpoint(t, jobDir, lead)) {
			if isParameter(name) || strings.HasPrefix(name, "moments.") {
				if _, dup := got[name]; dup {
					t.Errorf("%s saved by both stages", name)
				}
				got[name] = tt
			}
		}
	}
	for r := range 4 {
		if res := workerResult(t, jobDir, r); res.ResumedFrom == "" {
			t.Errorf("rank %d did not resume", r)
		}
	}
	if w := got["conv2.weight"]; fmt.Sprint(w.Dims) != "[32 16 3 3]" {
		t.Errorf("stage 1 saved conv2.weight %v, want it whole", w.Dims)
	}
	t.Logf("largest relative difference from stand_alone %.3g", compareTensors(t, got, want, func(name string) bool {
		return isParameter(name) || strings.HasPrefix(name, "moments.")
	}))
}
