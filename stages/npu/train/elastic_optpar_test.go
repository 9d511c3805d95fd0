package train_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
)

// TestShrinkParallelOptimizerEqualsHandChain trains semi_auto_net with
// the parallel optimizer and on_failure: shrink, a rank lost at step 6
// after the step-4 checkpoint, in layouts where a parameter's update is
// split both before and after the shrink:
//   - data_parallel on 4 devices, rank 2 lost: 3 survive, HCCL takes 2;
//     each rank updates a piece [768 128] of fc.weight before, [1536 128]
//     after;
//   - the same with integrated_save false: the shrink reshards every
//     rank's pieces (read through the lost job's strategy file), and each
//     rank of the new job saves its own;
//   - semi_auto_parallel with fc.matmul split in two on 8 devices, rank 5
//     lost, on to 4: pieces [768 64] of the slice [3072 64] before,
//     [1536 64] after;
//   - auto_parallel on 4 devices with optimizer_weight_shard_size 2, rank 1
//     lost, on to 2: the search splits fc.matmul's contraction (no repeated
//     slice of fc.weight), and end_point.weight [10 128], repeated, is
//     updated in halves [5 128] before and after.
//
// The new job's ranks find their init in their own layout, pieces
// included ("no tensor re-cut" in every rank's log); the reshard's
// strategy file is byte for byte the one the new job writes; and the last
// checkpoint equals, bit for bit, the chain by hand: the same job failing,
// ckpt/reshard of its step-4 checkpoint for the next training (model, mode,
// strategy and parallel_optimizer given; for auto_parallel, whole tensors
// its ranks cut their pieces from, as ckpt/reshard does not search), then
// npu/train on the smaller cluster with that set as init and init_resumes.
func TestShrinkParallelOptimizerEqualsHandChain(t *testing.T) {
	dataDir := synthData(t, 16) // 80 images: 5 steps of 16 per epoch
	split2 := map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}
	fcWeight := []int{3072, 128}
	for _, tc := range []struct {
		name                 string
		devices, lost, after int
		extra                map[string]any
		// param's optimizer piece (of a whole tensor of shape whole)
		// before and after the shrink.
		param              string
		whole              []int
		before, afterPiece string
		// reshard overrides the hand chain's ckpt/reshard inputs (nil:
		// removed); handRecut: the hand chain's ranks cut their init.
		reshard   map[string]any
		handRecut bool
	}{
		{name: "data_parallel 4 to 2", devices: 4, lost: 2, after: 2, extra: map[string]any{"mode": "data_parallel"},
			param: "fc.weight", whole: fcWeight, before: "[768 128]", afterPiece: "[1536 128]"},
		{name: "data_parallel 4 to 2, integrated_save false", devices: 4, lost: 2, after: 2, extra: map[string]any{"mode": "data_parallel", "integrated_save": false},
			param: "fc.weight", whole: fcWeight, before: "[768 128]", afterPiece: "[1536 128]"},
		{name: "semi_auto_parallel 8 to 4", devices: 8, lost: 5, after: 4, extra: map[string]any{"mode": "semi_auto_parallel", "strategy": split2},
			param: "fc.weight", whole: fcWeight, before: "[768 64]", afterPiece: "[1536 64]"},
		{name: "auto_parallel 4 to 2, shard size 2", devices: 4, lost: 1, after: 2, extra: map[string]any{"mode": "auto_parallel", "optimizer_weight_shard_size": 2},
			param: "end_point.weight", whole: []int{10, 128}, before: "[5 128]", afterPiece: "[5 128]",
			reshard: map[string]any{"mode": "semi_auto_parallel", "parallel_optimizer": nil, "optimizer_weight_shard_size": nil}, handRecut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := withBlock(dataDir, map[string]any{
				"model": "semi_auto_net", "parallel_optimizer": true, "batch_size": 16 / tc.devices,
				"epochs": 2, "save_checkpoint_steps": 2, "collective_timeout": "20s",
				"fault": map[string]any{"rank": tc.lost, "step": 6},
			})
			for k, v := range tc.extra {
				base[k] = v
			}
			integrated := tc.extra["integrated_save"] != false

			elastic := t.TempDir()
			r := mustRun(t, elastic, tc.devices, merged(base, map[string]any{"on_failure": "shrink"}))
			recs := shrinkRecords(r)
			if len(recs) != 1 || fieldInt(recs[0], "lost_rank") != tc.lost || fieldInt(recs[0], "resumed_step") != 4 || fieldInt(recs[0], "to_devices") != tc.after {
				t.Fatalf("shrink records %v, want one: rank %d lost, resumed after step 4 on %d devices", recs, tc.lost, tc.after)
			}
			t.Logf("shrink: %v → %v", recs[0]["from_layout"], recs[0]["to_layout"])
			shrunk := filepath.Join(elastic, "shrink1")
			noRecut(t, shrunk, tc.after)
			// The lost job and the one after it both split fc.weight's
			// update; the reshard's strategy file is the one the new job
			// writes, byte for byte.
			if got := optPiece(t, filepath.Join(elastic, "strategy.ckpt"), tc.devices, tc.param, tc.whole); got != tc.before {
				t.Errorf("the lost job's %s piece %q, want %s", tc.param, got, tc.before)
			}
			jobStrategy := filepath.Join(shrunk, "strategy.ckpt")
			if got := optPiece(t, jobStrategy, tc.after, tc.param, tc.whole); got != tc.afterPiece {
				t.Errorf("the shrunk job's %s piece %q, want %s", tc.param, got, tc.afterPiece)
			}
			sameFile(t, filepath.Join(shrunk, "resharded", "strategy.ckpt"), jobStrategy)

			hand := t.TempDir()
			if failed := runStage(t.Context(), hand, tc.devices, 1, base); failed.err == nil || !strings.Contains(failed.err.Error(), fmt.Sprintf("rank %d", tc.lost)) {
				t.Fatalf("the %d-device job without on_failure: err %v, want it to fail naming rank %d", tc.devices, failed.err, tc.lost)
			}
			from := filepath.Join(hand, "device0", "ckpt_0", "CKP-1_4.ckpt")
			if !integrated {
				from = hand // every rank's pieces, with the job's strategy.ckpt
			}
			reshardWith := map[string]any{
				"from": from, "devices": tc.after, "model": "semi_auto_net", "mode": base["mode"],
				"batch_size": 16 / tc.after, "parallel_optimizer": true,
			}
			for k, v := range tc.extra {
				if k == "strategy" || k == "optimizer_weight_shard_size" {
					reshardWith[k] = v
				}
			}
			set := reshardSet(t, merged(reshardWith, tc.reshard))
			again := t.TempDir()
			mustRun(t, again, tc.after, merged(base, map[string]any{"batch_size": 16 / tc.after, "init": set, "init_resumes": true, "fault": nil}))
			if !tc.handRecut {
				sameFile(t, filepath.Join(set, "strategy.ckpt"), jobStrategy)
				noRecut(t, again, tc.after)
			}
			ranks := []int{0}
			if !integrated {
				ranks = []int{0, tc.after - 1}
			}
			for _, rank := range ranks {
				got, want := lastCheckpoint(t, shrunk, rank), lastCheckpoint(t, again, rank)
				if filepath.Base(got) != "CKP-2_5.ckpt" || filepath.Base(want) != "CKP-2_5.ckpt" {
					t.Errorf("rank %d: last checkpoints %s and %s, want both of epoch 2's step 5", rank, got, want)
				}
				tensors := readTensors(t, got)
				if !integrated {
					for _, name := range []string{tc.param, "moments." + tc.param} {
						if dims := fmt.Sprint(tensors[name].Dims); dims != tc.afterPiece {
							t.Errorf("rank %d saved %s as %s, want its piece %s", rank, name, dims, tc.afterPiece)
						}
					}
				}
				sameTensors(t, fmt.Sprintf("rank %d after the shrink, against the chain by hand", rank), tensors, readTensors(t, want))
			}
		})
	}
}

// noRecut fails the test unless every rank of the job in jobDir said in
// its log that its init was in its layout (no tensor cut from a whole one).
func noRecut(t *testing.T, jobDir string, devices int) {
	t.Helper()
	for rank := range devices {
		log, err := os.ReadFile(launch.LogPath(jobDir, rank))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "is in this rank's layout: no tensor re-cut") {
			t.Errorf("rank %d of the job in %s did not find its init in its layout:\n%s", rank, jobDir, log)
		}
	}
}

// optPiece reads a strategy file of a job on devices devices and returns
// the shape of rank 0's optimizer piece of param, whole of that shape
// ("" when its update is not split).
func optPiece(t *testing.T, path string, devices int, param string, whole []int) string {
	t.Helper()
	sf, err := parallel.ReadStrategyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := sf.Layouts[param]
	if !ok || l.OptWeightShardSize == 0 {
		return ""
	}
	if sf.Devices() != devices {
		t.Errorf("%s is for %d devices, want %d", path, sf.Devices(), devices)
	}
	boxes, err := l.Boxes(whole)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(boxes[0].Shape)
}

// sameFile fails the test unless the files hold the same bytes.
func sameFile(t *testing.T, got, want string) {
	t.Helper()
	a, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s (%d bytes) differs from %s (%d bytes)", got, len(a), want, len(b))
	}
}
