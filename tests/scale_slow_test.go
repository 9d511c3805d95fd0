//go:build slow

package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScale64To56ExampleRuns runs examples/scale-64-to-56.yaml as it is:
// 64 rank processes (8 loopback servers of 8), then 56 (7 of 8). About two
// minutes on the 2-core machine, so it is behind the slow tag:
// go test -tags slow -run Scale64 -timeout 30m ./tests
func TestScale64To56ExampleRuns(t *testing.T) {
	const (
		trainSteps   = 2 * 14 // 3584 images / 64 shards / batch 4, 2 epochs
		retrainSteps = 16     // 3584 / 56 / 4, 1 epoch
	)
	w := newWorkspace(t)
	for _, name := range []string{"scale-64-to-56.yaml", "rank_table_64pcs_local.json", "rank_table_56pcs_local.json"} {
		data, err := os.ReadFile(filepath.Join("../examples", name))
		if err != nil {
			t.Fatal(err)
		}
		w.write(name, string(data))
	}
	r := w.runFor(30*60, "run", "scale-64-to-56.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	st := w.state(id)
	for _, s := range []string{"prepare", "train", "integrate", "reshard", "retrain"} {
		if got := st.Stages[s].Status; got != "succeeded" {
			t.Fatalf("stage %s: %q, want succeeded (reason %q)", s, got, st.Stages[s].Reason)
		}
	}
	runDir := filepath.Join(w.dir, "runs", id)

	// One process and one device{i}/ directory per rank: 64, then 56.
	for stage, ranks := range map[string]int{"train": 64, "retrain": 56} {
		dir := filepath.Join(runDir, "stages", stage)
		for _, rank := range []int{ranks - 1, ranks} {
			_, err := os.Stat(filepath.Join(dir, fmt.Sprintf("device%d", rank), fmt.Sprintf("train.log%d", rank)))
			if exists := err == nil; exists != (rank < ranks) {
				t.Errorf("stage %s: device%d/train.log%d exists: %v; want %d ranks", stage, rank, rank, exists, ranks)
			}
		}
	}
	// Every rank of the 64 saved its slices (integrated_save: false).
	if steps := savedGlobalSteps(t, filepath.Join(runDir, "stages", "train"), 64); steps[63] != trainSteps {
		t.Errorf("train rank 63: saved global_step %d, want %d", steps[63], trainSteps)
	}

	integrated := manifestHashes(t, filepath.Join(runDir, "stages", "integrate", "checkpoint", "manifest.json"))
	resharded := manifestHashes(t, filepath.Join(runDir, "stages", "reshard", "checkpoints", "manifest.json"))
	if len(resharded) != len(integrated) {
		t.Errorf("%d tensors resharded, %d integrated", len(resharded), len(integrated))
	}
	for name, h := range integrated {
		if resharded[name] != h {
			t.Errorf("tensor %s: reshard manifest %q, integrate manifest %q", name, resharded[name], h)
		}
	}

	steps := rank0Steps(t, runDir)
	train, retrain := steps["train"], steps["retrain"]
	if len(train) != trainSteps || len(retrain) != retrainSteps {
		t.Fatalf("rank 0 step events: train %d, retrain %d; want %d and %d", len(train), len(retrain), trainSteps, retrainSteps)
	}
	trained := mean(train[len(train)/2:])
	accTrain, _ := st.Stages["train"].Outputs["accuracy"].(float64)
	accRetrain, _ := st.Stages["retrain"].Outputs["accuracy"].(float64)
	t.Logf("loss: train's first step %.4f, last epoch mean %.4f; retrain's first step %.4f; accuracy: train %.4f, retrain %.4f",
		train[0].Loss, trained, retrain[0].Loss, accTrain, accRetrain)
	if retrain[0].Loss > trained+0.1 || retrain[0].Loss > train[0].Loss-0.1 {
		t.Errorf("retrain's first loss %.4f: want at most the train's last epoch (%.4f) + 0.1 and clearly below its untrained first loss %.4f",
			retrain[0].Loss, trained, train[0].Loss)
	}
	if accRetrain < accTrain {
		t.Errorf("retrain's accuracy %.4f, below the train's %.4f", accRetrain, accTrain)
	}
	if g := savedGlobalSteps(t, filepath.Join(runDir, "stages", "retrain"), 1)[0]; g != trainSteps+retrainSteps {
		t.Errorf("retrain: saved global_step %d, want %d (the optimizer state continues)", g, trainSteps+retrainSteps)
	}
}
