package job

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/trainer"
)

// wireEngine makes tc train this rank's part of a network on the
// operator-parallel engine (npu/shard): the split modes, and models only
// the engine builds. Rank 0 writes the strategy file once the network is
// laid out; with integrated_save, rank 0 saves whole tensors and every rank
// resumes from its checkpoints.
func wireEngine(cfg Config, rank, size int, comm *collective.Comm, jobDir string, tc *trainer.Config) {
	sc := shard.Config{
		Model: cfg.Model, Mode: cfg.Mode, Strategy: cfg.Strategy, Devices: size, Rank: rank,
		BatchPerDevice: tc.BatchSize, FullBatch: cfg.FullBatch, DatasetStrategy: cfg.DatasetStrategy,
		GradientsMean:     cfg.GradientsMean,
		ParallelOptimizer: cfg.ParallelOptimizer, OptimizerShardSize: cfg.OptimizerShardSize,
		Seed: cfg.Seed, Threads: tc.Threads,
	}
	if cfg.Mode.OneDevice() {
		sc.Devices, sc.Rank = 1, 0
	}
	if comm != nil {
		sc.Comm = comm
		tc.Rank = rank
	}
	// The engine reduces the gradients itself.
	tc.Reduce, tc.AllocGrads, tc.Broadcast = nil, nil, nil
	tc.Sharded = func(memory int64) (trainer.ShardedNet, error) {
		sc.Memory = memory
		net, err := shard.New(sc)
		if err != nil {
			return nil, err
		}
		if rank == 0 && cfg.StrategyFile != "" {
			f := strategyFile(net.OpLayouts(), net.Layouts(), net.OptimizerLayouts())
			if err := parallel.WriteStrategyFile(cfg.StrategyFile, f, strategyFormat(cfg.StrategyFile)); err != nil {
				net.Close()
				return nil, fmt.Errorf("strategy file: %w", err)
			}
		}
		return net, nil
	}
	if comm != nil && cfg.IntegratedSave {
		tc.IntegratedSave = true
		tc.ResumeDir = filepath.Join(launch.DeviceDir(jobDir, 0), "ckpt_0")
	}
}

// strategyFile builds the strategy file of a split network from the
// layouts its engine runs: every operator's strategy and every
// parameter's layout, with opt_weight_shard_step and opt_weight_shard_size
// for the parameters whose update the parallel optimizer splits (optShard).
func strategyFile(ops []*parallel.OpLayout, params map[string]parallel.Layout, optShard map[string]parallel.TensorLayout) *parallel.StrategyFile {
	f := &parallel.StrategyFile{CurrentStage: 0, Operators: map[string][][]int{}, Layouts: map[string]parallel.TensorLayout{}}
	for _, ol := range ops {
		if ol != nil {
			f.Operators[ol.Op] = ol.Strategy
		}
	}
	for name, l := range params {
		f.Layouts[name] = parallel.TensorLayoutOf(l)
		if tl, ok := optShard[name]; ok {
			f.Layouts[name] = tl
		}
	}
	return f
}

// strategyFormat picks the strategy file's encoding from its name: JSON
// for .json, MindSpore's protobuf otherwise.
func strategyFormat(path string) parallel.StrategyFormat {
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return parallel.FormatJSON
	}
	return parallel.FormatProto
}
