package train_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/parallel"
)

// TestShrinkPipelineEqualsHandChain trains cnn with 2 pipeline stages on
// 8 devices (4 a stage: conv1 and the pool on ranks 0-3, conv2 onwards on
// ranks 4-7), 4 micro-batches a step, and on_failure: shrink: in
// semi_auto_parallel with a strategy splitting the batch of conv1 and
// conv2's output channels (its weight in halves) inside the stages, with
// and without integrated_save, and in auto_parallel, whose search runs
// again for the smaller stage groups. Rank 5 (stage 1) dies at step 6,
// after the step-4 checkpoint: 7 devices are left, HCCL takes 4, which
// keep the 2 stages on 2 devices each with the stage's global batch of 8
// (4 a device).
//
// The new job's ranks find their init in their own layout ("no tensor
// re-cut" in every rank's log): each holds its stage's slices only. The
// reshard's strategy file is byte for byte the merged one the new job
// writes from its stages' files. The new job's checkpoints equal, bit for
// bit, the chain by hand: the same job failing, ckpt/reshard of its step-4
// set (read through its per-stage strategy files) for the next training
// (model, mode, strategy, pipeline_stages and micro_size; for auto_parallel
// semi_auto_parallel with the strategy mspipe plan gives for 4 devices),
// then npu/train on 4 devices with that set as init and init_resumes;
// ckpt/reshard given the new job's per-stage strategy files as
// target_strategy writes the same set. With integrated_save the lost job's
// set is its stage leads' whole tensors; without it, every rank's slices.
func TestShrinkPipelineEqualsHandChain(t *testing.T) {
	dataDir := synthData(t, 16) // 80 images: 10 steps of 8 per epoch
	strategy := map[string]any{
		"conv1": []any{[]any{2, 1, 1, 1}, []any{1, 1, 1, 1}},
		"conv2": []any{[]any{1, 1, 1, 1}, []any{2, 1, 1, 1}},
	}
	for _, tc := range []struct {
		name       string
		extra      map[string]any
		integrated bool
		// conv2 is a slice of the whole [32 16 3 3] on the new job's stage
		// 1 (semi_auto_parallel's strategy splits it).
		conv2 string
	}{
		{"semi_auto_parallel", map[string]any{"mode": "semi_auto_parallel", "strategy": strategy}, true, "[16 16 3 3]"},
		{"semi_auto_parallel, integrated_save false", map[string]any{"mode": "semi_auto_parallel", "strategy": strategy, "integrated_save": false}, false, "[16 16 3 3]"},
		{"auto_parallel", map[string]any{"mode": "auto_parallel"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := withBlock(dataDir, merged(map[string]any{
				"model": "cnn", "pipeline_stages": 2, "micro_size": 4,
				"batch_size": 2, "epochs": 1, "save_checkpoint_steps": 2, "collective_timeout": "20s",
				"fault": map[string]any{"rank": 5, "step": 6},
			}, tc.extra))
			elastic := t.TempDir()
			r := mustRun(t, elastic, 8, merged(base, map[string]any{"on_failure": "shrink"}))
			recs := shrinkRecords(r)
			if len(recs) != 1 || fieldInt(recs[0], "lost_rank") != 5 || fieldInt(recs[0], "resumed_step") != 4 || fieldInt(recs[0], "to_devices") != 4 {
				t.Fatalf("shrink records %v, want one: rank 5 lost, resumed after step 4 on 4 devices", recs)
			}
			if !strings.Contains(fmt.Sprint(recs[0]["to_layout"]), "4 devices, batch 4 per device, 2 pipeline stages of 2 devices") {
				t.Errorf("shrink record to_layout %q, want 4 devices of batch 4 in 2 stages of 2", recs[0]["to_layout"])
			}
			t.Logf("shrink: %v → %v", recs[0]["from_layout"], recs[0]["to_layout"])
			shrunk := filepath.Join(elastic, "shrink1")
			noRecut(t, shrunk, 4)
			jobStrategy := filepath.Join(shrunk, "strategy.ckpt")
			sameFile(t, filepath.Join(shrunk, "resharded", "strategy.ckpt"), jobStrategy)
			// Each rank of the new job was given its stage's parameters
			// only.
			for rank, want := range map[int]string{0: "conv1.weight", 1: "conv1.weight", 2: "conv2.weight", 3: "conv2.weight"} {
				init := readTensors(t, lastCheckpoint(t, filepath.Join(shrunk, "resharded"), rank))
				other := map[string]string{"conv1.weight": "conv2.weight", "conv2.weight": "conv1.weight"}[want]
				if _, ok := init[want]; !ok {
					t.Errorf("rank %d's init lacks %s", rank, want)
				}
				if _, ok := init[other]; ok {
					t.Errorf("rank %d's init holds %s, another stage's", rank, other)
				}
				if want == "conv2.weight" && tc.conv2 != "" && fmt.Sprint(init[want].Dims) != tc.conv2 {
					t.Errorf("rank %d's init holds conv2.weight as %v, want its slice %s", rank, init[want].Dims, tc.conv2)
				}
			}

			hand := t.TempDir()
			if failed := runStage(t.Context(), hand, 8, 1, base); failed.err == nil || !strings.Contains(failed.err.Error(), "rank 5") {
				t.Fatalf("the 8-device job without on_failure: err %v, want it to fail naming rank 5", failed.err)
			}
			// The failed job merged its stages' files as a finished job
			// does: ckpt/reshard finds strategy.ckpt beside the set, and
			// reads the same layout as from the stages' own files.
			if _, err := os.Stat(filepath.Join(hand, "strategy.ckpt")); err != nil {
				t.Errorf("the failed job left no merged strategy file: %v", err)
			}
			handStrategy := stageStrategyDir(t, filepath.Join(hand, "strategy.ckpt"))
			reshardWith := map[string]any{
				"from": hand, "devices": 4,
				"model": "cnn", "mode": "semi_auto_parallel", "strategy": strategy, "batch_size": 4,
				"pipeline_stages": 2, "micro_size": 4,
			}
			if tc.extra["mode"] == "auto_parallel" {
				// What mspipe plan prints for the next training.
				p, err := job.Plan(job.Layout{Model: "cnn", Mode: parallel.AutoParallel, BatchSize: 4, Devices: 4, PipelineStages: 2, MicroSize: 4})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("auto_parallel on 2 stages of 2 devices: %v", p.Strategy)
				reshardWith["strategy"] = p.Strategy
			}
			set := reshardSet(t, reshardWith)
			sameFile(t, filepath.Join(set, "strategy.ckpt"), jobStrategy)
			byFiles := reshardSet(t, map[string]any{
				"from": hand, "source_strategy": handStrategy, "devices": 4,
				"target_strategy": stageStrategyDir(t, jobStrategy),
			})
			again := t.TempDir()
			mustRun(t, again, 4, merged(base, map[string]any{"batch_size": 4, "init": set, "init_resumes": true, "fault": nil}))
			noRecut(t, again, 4)
			for rank := range 4 {
				model, files := readTensors(t, lastCheckpoint(t, set, rank)), readTensors(t, lastCheckpoint(t, byFiles, rank))
				sameTensors(t, fmt.Sprintf("rank %d's init by target_strategy, against the model target", rank), files, model)
			}
			ranks := []int{0, 2} // the stage leads save their stage's whole tensors
			if !tc.integrated {
				ranks = []int{0, 1, 2, 3}
			}
			for _, rank := range ranks {
				got, want := lastCheckpoint(t, shrunk, rank), lastCheckpoint(t, again, rank)
				if filepath.Base(got) != "CKP-1_10.ckpt" || filepath.Base(want) != "CKP-1_10.ckpt" {
					t.Errorf("rank %d: last checkpoints %s and %s, want both of step 10", rank, got, want)
				}
				sameTensors(t, fmt.Sprintf("rank %d after the shrink, against the chain by hand", rank), readTensors(t, got), readTensors(t, want))
			}
		})
	}
}

// stageStrategyDir copies the per-stage strategy files a 2-stage job
// wrote beside path (job.StageStrategyFile) into a directory of their own,
// as a user gathers them for ckpt/reshard, and returns it.
func stageStrategyDir(t *testing.T, path string) string {
	t.Helper()
	dir := t.TempDir()
	for s := range 2 {
		from := job.StageStrategyFile(path, s)
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if f, err := parallel.ReadStrategyFile(from); err != nil || f.CurrentStage != s {
			t.Fatalf("%s: %v, current_stage %v; want stage %d's file", from, err, f, s)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(from)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestShrinkPipelineTwice: a 2-stage pipeline job on 8 devices loses rank
// 5 (stage 1), goes on as 2 stages of 2 on 4 devices, loses rank 1 there
// (stage 0; the shrunk job's per-stage strategy files lay its set out) and
// goes on as 2 stages of 1 on 2 devices, each rank finding its init in its
// layout; the stage ends with the last job's outputs at global step 10.
func TestShrinkPipelineTwice(t *testing.T) {
	dataDir := synthData(t, 16) // 80 images: 10 steps of 8 per epoch
	r := mustRun(t, t.TempDir(), 8, withBlock(dataDir, map[string]any{
		"model": "cnn", "mode": "semi_auto_parallel", "pipeline_stages": 2, "micro_size": 2,
		"batch_size": 2, "epochs": 1, "save_checkpoint_steps": 2, "collective_timeout": "20s",
		"on_failure": "shrink", "faults": []any{
			map[string]any{"rank": 5, "step": 6},
			map[string]any{"rank": 1, "step": 9, "shrink": 1},
		},
	}))
	recs := shrinkRecords(r)
	checkShrinkRecords(t, recs, []map[string]int{
		{"shrink": 1, "lost_rank": 5, "resumed_step": 4, "from_devices": 8, "to_devices": 4},
		{"shrink": 2, "lost_rank": 1, "resumed_step": 8, "from_devices": 4, "to_devices": 2},
	})
	if !strings.Contains(fmt.Sprint(recs[1]["to_layout"]), "2 pipeline stages of 1 device") {
		t.Errorf("second shrink to_layout %q, want 2 stages of 1 device", recs[1]["to_layout"])
	}
	last, _ := r.outputs["checkpoints"].(string)
	if filepath.Base(last) != "shrink2" || r.outputs["global_step"] != 10 {
		t.Errorf("outputs checkpoints %v, global_step %v: want shrink2's and 10", last, r.outputs["global_step"])
	}
	noRecut(t, last, 2)
	for rank := range 2 {
		if got := filepath.Base(lastCheckpoint(t, last, rank)); got != "CKP-1_10.ckpt" {
			t.Errorf("the 2-device job's rank %d ended with %s, want CKP-1_10.ckpt", rank, got)
		}
	}
}
