package train_test

import (
	"fmt"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

// TestDatasetSliceStageEqualsStandAlone runs the real npu/train stage with
// MindSpore's dataset_strategy tuple on 2, 4 and 8 rank processes: the
// CIFAR images cut along H, along W, and along both (each piece on two
// ranks), in semi_auto_parallel and auto_parallel. Every rank loads only
// its piece of each image (npu/shard's tests check the pieces); after 15 steps of the same global batch of 16
// the checkpoint (weights and moments.*) agrees with stand_alone's within
// float32 rounding.
func TestDatasetSliceStageEqualsStandAlone(t *testing.T) {
	dataDir := synthData(t, 48) // 240 images: 15 steps of 16
	aloneDir := t.TempDir()
	mustRun(t, aloneDir, 1, withBlock(dataDir, map[string]any{"mode": "stand_alone", "batch_size": 16}))
	want := readTensors(t, lastCheckpoint(t, aloneDir, 0))
	for _, tc := range []struct {
		mode    string
		devices int
		splits  []any
	}{
		{"semi_auto_parallel", 2, []any{[]any{1, 1, 2, 1}, []any{1}}},
		{"semi_auto_parallel", 4, []any{[]any{1, 1, 1, 4}, []any{1}}},
		{"semi_auto_parallel", 8, []any{[]any{1, 1, 2, 2}, []any{1}}},
		{"auto_parallel", 2, []any{[]any{1, 1, 2, 1}, []any{1}}},
		// Each direction on each device count.
		{"semi_auto_parallel", 2, []any{[]any{1, 1, 1, 2}, []any{1}}},
		{"semi_auto_parallel", 4, []any{[]any{1, 1, 4, 1}, []any{1}}},
		{"semi_auto_parallel", 8, []any{[]any{1, 1, 8, 1}, []any{1}}},
		{"semi_auto_parallel", 8, []any{[]any{1, 1, 1, 8}, []any{1}}},
	} {
		t.Run(fmt.Sprintf("%s %d devices %v", tc.mode, tc.devices, tc.splits), func(t *testing.T) {
			dir := t.TempDir()
			r := mustRun(t, dir, tc.devices, withBlock(dataDir, map[string]any{"mode": tc.mode, "batch_size": 16, "dataset_strategy": tc.splits}))
			if got := fmt.Sprint(r.outputs["global_step"]); got != "15" {
				t.Errorf("global_step %s, want 15", got)
			}
			// The images' pieces went into the first convolution as they
			// are: the strategy file says it ran on them.
			sf, err := parallel.ReadStrategyFile(r.outputs["strategy"].(string))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fmt.Sprint(sf.Operators["conv1"]), fmt.Sprint(tc.splits[0], " [1 1 1 1]"); got != "["+want+"]" {
				t.Errorf("strategy file: conv1 runs %s, want [%s]", got, want)
			}
			got := readTensors(t, lastCheckpoint(t, dir, 0))
			t.Logf("largest relative difference from stand_alone %.3g", compareTensors(t, got, want, nil))
		})
	}
}
