package train_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
)

// TestEpochEvaluationSharedByRanks checks the evaluation after an epoch,
// which the ranks of a 2-device job share (each predicts its own part of
// the test set, and they add up their counts), against the final
// evaluation of a 1-epoch run with the same seed, which rank 0 runs on
// the whole test set: the same weights, so exactly the same accuracy.
// Data parallel and semi-auto parallel (a split network, whose Predict is
// collective).
func TestEpochEvaluationSharedByRanks(t *testing.T) {
	dataDir := synthData(t, 8) // 40 training images, 20 test images
	for _, mode := range []map[string]any{
		{"mode": "data_parallel"},
		{"mode": "semi_auto_parallel", "strategy": map[string]any{"end_point.matmul": []any{[]any{1, 1}, []any{2, 1}}}, "integrated_save": false},
	} {
		name := mode["mode"].(string)
		one := map[string]any{"eval": true, "epochs": 1, "learning_rate": 0.05}
		two := map[string]any{"eval": true, "epochs": 2, "learning_rate": 0.05}
		for k, v := range mode {
			one[k], two[k] = v, v
		}
		oneDir := t.TempDir()
		mustRun(t, oneDir, 2, withBlock(dataDir, one))
		final := workerResult(t, oneDir, 0)

		run := mustRun(t, t.TempDir(), 2, withBlock(dataDir, two))
		var accs, losses []float64
		var steps []int64
		run.mu.Lock()
		for _, ev := range run.events {
			switch {
			case ev.Metric != nil && ev.Metric.Name == job.MetricEvalAccuracy:
				accs = append(accs, ev.Metric.Value)
				steps = append(steps, ev.Metric.Step)
			case ev.Metric != nil && ev.Metric.Name == job.MetricEvalLoss:
				losses = append(losses, ev.Metric.Value)
			}
		}
		run.mu.Unlock()
		// 40 images over 2 ranks of 4: 5 steps per epoch.
		if len(accs) != 2 || len(losses) != 2 || steps[0] != 5 || steps[1] != 10 {
			t.Fatalf("%s: evaluations %v at global steps %v, want two, after steps 5 and 10", name, accs, steps)
		}
		t.Logf("%s: after epoch 1 %v (shared), %v (one rank, whole set); after epoch 2 %v", name, accs[0], final.Accuracy, accs[1])
		// The 1-epoch run's rank 0 prints its final evaluation's loss to
		// 4 decimals.
		log, err := os.ReadFile(launch.LogPath(oneDir, 0))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("accuracy: %.4f, eval loss: %.4f\n", final.Accuracy, losses[0]); !strings.Contains(string(log), want) {
			t.Errorf("%s: the shared evaluation after epoch 1 gives %q, the 1-epoch run's rank 0 said:\n%s", name, want, log)
		}
		if accs[0] != final.Accuracy {
			t.Errorf("%s: the shared evaluation after epoch 1 says %v, rank 0's of the whole test set after a 1-epoch run %v", name, accs[0], final.Accuracy)
		}
	}
}
