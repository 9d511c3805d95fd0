package job

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

// Under a dataset_strategy tuple a rank loads its sample shard (the batch
// split) and its window of every image; the plan's global batch is the
// batch per device times the batch split; auto_parallel's searched
// strategy gives way to the images' pieces for the leading operators, and
// the plan text says so; a tuple that does not fit the devices is refused
// as with.dataset_strategy.
func TestDatasetStrategyJob(t *testing.T) {
	splits := [][]int{{2, 1, 2, 2}, {2}}
	// Rank 5 of 8: repeat 1, then batch, H, W axes: coordinates (1, 0, 1).
	tc, err := TrainerConfig(Config{Model: "cnn", Mode: parallel.SemiAutoParallel, BatchSize: 4, DatasetStrategy: splits}, 5, 8, nil)
	if err != nil || tc.NumShards != 2 || tc.ShardID != 1 || tc.BatchSize != 4 ||
		tc.ImageWindow.Offset != [3]int{0, 0, 16} || tc.ImageWindow.Shape != [3]int{3, 16, 16} {
		t.Errorf("rank 5 of 8 under %v: shards %d id %d batch %d window %+v, %v", splits, tc.NumShards, tc.ShardID, tc.BatchSize, tc.ImageWindow, err)
	}
	l := Layout{Model: "cnn", Mode: parallel.AutoParallel, BatchSize: 4, Devices: 8, DatasetStrategy: splits}
	if g := l.GlobalBatch(); g != 8 {
		t.Errorf("global batch %d, want 4 × 2", g)
	}
	p, err := Plan(l)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.Strategy["conv1"]); got != "[[2 1 2 2] [1 1 1 1]]" {
		t.Errorf("auto_parallel conv1 %s, want the images' pieces [[2 1 2 2] [1 1 1 1]]", got)
	}
	var b strings.Builder
	if err := PlanText(&b, l); err != nil || !strings.Contains(b.String(), "conv1 runs [[2 1 2 2] [1 1 1 1]] on the images' pieces") {
		t.Errorf("plan text does not say conv1 runs on the pieces (%v):\n%s", err, b.String())
	}
	l.Devices = 2
	_, err = Plan(l)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "dataset_strategy" || !strings.Contains(err.Error(), "does not divide the job's 2") {
		t.Errorf("8 pieces on 2 devices: %v, want with.dataset_strategy refused", err)
	}
}
