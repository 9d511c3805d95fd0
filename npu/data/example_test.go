package data_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/npu/data"
)

// Prepare a small synthetic data set with per-shard files for 4 ranks, then
// read rank 1's first training batch through the seeds' pipeline.
func Example() {
	ctx := context.Background()
	root, err := os.MkdirTemp("", "cifar-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)

	synth := data.SynthConfig{Seed: 7, TrainPerBatch: 100, TestRecords: 50}
	m, err := data.Prepare(ctx, root, data.PrepareOptions{Source: data.SourceSynthetic, Synth: synth, NumShards: 4})
	if err != nil {
		panic(err)
	}
	fmt.Println("train records:", m.Train.Records, "test records:", m.Test.Records)
	fmt.Println("rank 1 shard file:", m.Shards.Shards[1].TrainFile, m.Shards.Shards[1].TrainRecords)
	if _, err := data.Verify(root); err != nil {
		panic(err)
	}

	train, err := data.ReadDir(filepath.Join(root, data.DataDirName), data.SplitTrain)
	if err != nil {
		panic(err)
	}
	p, err := data.NewPipeline(train, data.SeedConfig(4, 1, 42))
	if err != nil {
		panic(err)
	}
	it, err := p.Iterate(ctx, 0, 1, 2)
	if err != nil {
		panic(err)
	}
	defer it.Close()
	b, err := it.Next()
	if err != nil {
		panic(err)
	}
	fmt.Println("steps per epoch:", p.StepsPerEpoch())
	fmt.Printf("batch: %d×%d×%d×%d float32, %d labels\n", b.N, b.C, b.H, b.W, len(b.Labels))
	// Output:
	// train records: 500 test records: 50
	// rank 1 shard file: shards/train_shard_1_of_4.bin 125
	// steps per epoch: 3
	// batch: 32×3×32×32 float32, 32 labels
}
