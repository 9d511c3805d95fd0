package eval_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/trainer"
)

// TestEvalSplitModels trains each model only the split engine builds for
// four steps on one device, as npu/job wires a stand_alone (or, for
// hybrid_net, a one-device hybrid_parallel) training, and checks that the
// stage's accuracy and loss on the test set equal the trainer's own
// evaluation of the same network. The stage builds its network from seed
// 0 and the training from seed 1, so equal numbers need the checkpoint
// restored; the first step's checkpoint must score a different loss, and
// a reshard output of the last one, split in two, the same numbers.
func TestEvalSplitModels(t *testing.T) {
	dataDir := t.TempDir()
	writeGratings(t, dataDir, 13, 32) // 65 training images: 4 steps of 16
	for _, model := range []string{"semi_auto_net", "hybrid_net", "wide_net"} {
		t.Run(model, func(t *testing.T) {
			mode := parallel.StandAlone
			if model == "hybrid_net" {
				mode = parallel.HybridParallel
			}
			ckptDir := t.TempDir()
			res, err := trainer.Train(context.Background(), trainer.Config{
				DataDir: dataDir, Model: model, Epochs: 1, BatchSize: 16, LearningRate: 0.05, Seed: 1,
				NoAugment: true, Eval: true, CkptDir: ckptDir, SaveCheckpointSteps: 1,
				Sharded: func(memory int64) (trainer.ShardedNet, error) {
					return shard.New(shard.Config{Model: model, Mode: mode, Devices: 1, BatchPerDevice: 16, Seed: 1, Memory: memory})
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.GlobalStep != 4 || filepath.Base(res.Checkpoint) != "CKP-1_4.ckpt" {
				t.Fatalf("trained %d steps to %s, want 4 steps to CKP-1_4.ckpt", res.GlobalStep, res.Checkpoint)
			}
			out, _, err := run(t, map[string]any{"checkpoint": ckptDir, "data": dataDir, "model": model})
			if err != nil {
				t.Fatal(err)
			}
			acc, loss := out["accuracy"].(float64), out["loss"].(float64)
			t.Logf("%s: accuracy %.4f loss %.4f (trainer %.4f %.4f)", model, acc, loss, res.Accuracy, res.EvalLoss)
			if acc != res.Accuracy || loss != res.EvalLoss || out["checkpoint"] != res.Checkpoint {
				t.Errorf("stage: %v; trainer: accuracy %v loss %v of %s", out, res.Accuracy, res.EvalLoss, res.Checkpoint)
			}
			if !(loss > 0) || acc < 0 || acc > 1 {
				t.Errorf("accuracy %v loss %v out of range", acc, loss)
			}

			// Another split model's checkpoint is refused by name.
			other := map[string]string{"semi_auto_net": "wide_net", "hybrid_net": "wide_net", "wide_net": "semi_auto_net"}[model]
			wrong, _, err := run(t, map[string]any{"checkpoint": res.Checkpoint, "data": dataDir, "model": other})
			if want := res.Checkpoint + ": checkpoint does not match the model " + other + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("%s's checkpoint as %s: outputs %v, error %v; want %q…", model, other, wrong, err, want)
			}

			first, _, err := run(t, map[string]any{"checkpoint": filepath.Join(ckptDir, "CKP-1_1.ckpt"), "data": dataDir, "model": model, "batch_size": 7})
			if err != nil {
				t.Fatal(err)
			}
			if first["loss"] == loss {
				t.Errorf("the first step's checkpoint scores loss %v, as the last one does", loss)
			}

			// Split the first two-dimensional tensor by rows over two ranks:
			// the stage merges the set whole and scores the same.
			tensors, err := ckpt.Read(res.Checkpoint)
			if err != nil {
				t.Fatal(err)
			}
			target := reshard.Target{Ranks: 2, Placements: map[string]reshard.Placement{},
				Files: []string{"device0/ckpt_0/CKP-1_4.ckpt", "device1/ckpt_1/CKP-1_4.ckpt"}}
			for _, x := range tensors {
				if len(x.Dims) == 2 && x.Dims[0] > 1 {
					shape := []int{int(x.Dims[0]), int(x.Dims[1])}
					half := shape[0] / 2
					target.Placements[x.Name] = reshard.Placement{Shape: shape, Boxes: []parallel.Box{
						{Offset: []int{0, 0}, Shape: []int{half, shape[1]}}, {Offset: []int{half, 0}, Shape: []int{shape[0] - half, shape[1]}}}}
					break
				}
			}
			if len(target.Placements) != 1 {
				t.Fatalf("%s has no two-dimensional tensor", model)
			}
			set := t.TempDir()
			if _, err := reshard.Run(context.Background(), reshard.Source{Files: []string{res.Checkpoint}}, target, set, reshard.Options{}); err != nil {
				t.Fatal(err)
			}
			fromSet, _, err := run(t, map[string]any{"checkpoint": set, "data": dataDir, "model": model})
			if err != nil {
				t.Fatal(err)
			}
			if fromSet["accuracy"] != acc || fromSet["loss"] != loss {
				t.Errorf("from a resharded set: %v; want accuracy %v loss %v", fromSet, acc, loss)
			}
		})
	}
}
