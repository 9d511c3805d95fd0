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
// laid out; with integrated_save, rank 0 (with a pipeline, each stage's
// first rank) saves whole tensors and every rank resumes from its
// checkpoints.
//
// With pipeline stages the network is this rank's stage's (pipe), over its
// stage group: every rank receives the global batch.
func wireEngine(cfg Config, rank, size int, comm *collective.Comm, pipe *pipeComms, jobDir string, tc *trainer.Config) {
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
	if pipe != nil {
		// A whole checkpoint restores into the slices of this rank's
		// place in its stage group.
		tc.Rank = pipe.rank
		sc.Devices, sc.Rank, sc.Comm, sc.Pipeline = pipe.devices, pipe.rank, pipe.stage, pipe.spec
		sc.BatchPerDevice, sc.FullBatch = tc.BatchSize, true
		if pipe.devices == 1 {
			sc.Comm = nil
		}
	}
	// The engine reduces the gradients itself.
	tc.Reduce, tc.AllocGrads, tc.Broadcast = nil, nil, nil
	tc.Sharded = func(memory int64) (trainer.ShardedNet, error) {
		sc.Memory = memory
		net, err := shard.New(sc)
		if err != nil {
			return nil, err
		}
		path, first := cfg.StrategyFile, rank == 0
		if pipe != nil {
			path, first = StageStrategyFile(cfg.StrategyFile, pipe.spec.Stage), pipe.rank == 0
		}
		if first && path != "" {
			if err := parallel.WriteStrategyFile(path, net.StrategyFile(), strategyFormat(path)); err != nil {
				net.Close()
				return nil, fmt.Errorf("strategy file: %w", err)
			}
		}
		return net, nil
	}
	if comm != nil && cfg.IntegratedSave {
		tc.IntegratedSave = true
		// The first rank of the group saves whole tensors (of its stage,
		// with a pipeline); every rank of the group resumes from them.
		first := 0
		if pipe != nil {
			first = rank - pipe.rank
		}
		tc.ResumeDir = filepath.Join(launch.DeviceDir(jobDir, first), fmt.Sprintf("ckpt_%d", first))
	}
}

// StageStrategyFile is where the first rank of pipeline stage s writes
// its stage's strategy file (MindSpore writes one per stage): path with
// _stage<s> before its extension, stage 0 included, so that path itself
// is left for the merged file of every stage (see npu/train's stage).
func StageStrategyFile(path string, s int) string {
	if path == "" {
		return path
	}
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s_stage%d%s", strings.TrimSuffix(path, ext), s, ext)
}

// MergeStageStrategies merges the per-stage strategy files a pipeline
// job's ranks wrote (StageStrategyFile of every stage) into one file at
// cfg.StrategyFile, in its format, as MindSpore's merge_pipeline_strategys
// does: the file the checkpoint tools find beside the set (a set of K
// stages needs every stage's layouts). The per-stage files stay; a
// missing or inconsistent one is an error naming it, and nothing is
// written then.
func MergeStageStrategies(cfg Config) error {
	if !cfg.Pipelined() || cfg.StrategyFile == "" {
		return nil
	}
	merged, err := ReadStageStrategies(cfg)
	if err != nil {
		return err
	}
	return parallel.WriteStrategyFile(cfg.StrategyFile, merged, strategyFormat(cfg.StrategyFile))
}

// ReadStageStrategies reads the per-stage strategy files a pipeline job's
// ranks wrote (StageStrategyFile of every stage) and merges them, each
// parameter's stages recorded (parallel.MergeStrategies): what
// MergeStageStrategies writes, and what a reshard of the job's set reads
// when the job failed before the merge.
func ReadStageStrategies(cfg Config) (*parallel.StrategyFile, error) {
	paths := make([]string, cfg.PipelineStages)
	for s := range paths {
		paths[s] = StageStrategyFile(cfg.StrategyFile, s)
	}
	merged, err := parallel.MergeStrategyFiles(paths...)
	if err != nil {
		return nil, fmt.Errorf("merge the stages' strategy files: %w", err)
	}
	return merged, nil
}

// strategyFormat picks the strategy file's encoding from its name: JSON
// for .json, MindSpore's protobuf otherwise.
func strategyFormat(path string) parallel.StrategyFormat {
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return parallel.FormatJSON
	}
	return parallel.FormatProto
}
