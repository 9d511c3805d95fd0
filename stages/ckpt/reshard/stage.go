// Package reshard provides the ckpt/reshard built-in stage: it turns a
// checkpoint (an integrated file, or a set of per-rank slices with its
// strategy file) into a set for another number of devices, slice to slice
// by box intersection under a memory cap (npu/reshard), optimizer state
// included.
//
// The target is the layout of the next training when its model is given
// (with mode, strategy, batch_size, parallel_optimizer and pipeline_stages
// as that training's): npu/shard derives
// where each of its ranks holds which slice, as the training itself does,
// so the training starts from its own slices with nothing to re-cut. Else
// it is the layout of target_strategy when given, else npu/reshard's
// rule for `devices`: a tensor the source splits is split into equal slices
// along its first split dimension; when that dimension does not divide,
// `indivisible` refuses (the default), splits unevenly or replicates;
// replicated tensors stay replicated.
//
// The stage writes checkpoints/device{i}/ckpt_{i}/{prefix}-{epoch}_{step}.ckpt
// per target rank in its work directory — the layout npu/train's init:
// reads — with checkpoints/strategy.ckpt (the target layout, as
// load_distributed_checkpoint's predict_strategy takes it) and
// checkpoints/manifest.json, written last once every output tensor's
// content hash has been checked against the source's. Progress is the
// bytes written.
package reshard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
	engine "github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name is the stage's `uses` name.
const Name = "ckpt/reshard"

// version is part of every cache key: bump it when the output changes.
const version = "1.3.0"

// With is the stage's `with` block.
type With struct {
	From           string             `json:"from" jsonschema:"minLength=1,format=path" description:"an integrated checkpoint (stages.integrate.outputs.checkpoint), or a directory of per-rank slices (device{i}/ckpt_{i}/, or a reshard output)"`
	Devices        int                `json:"devices" jsonschema:"minimum=1,maximum=4096" description:"devices of the target cluster (at most 4096: each is an output file to plan and write)"`
	TargetStrategy string             `json:"target_strategy,omitempty" jsonschema:"format=path" description:"strategy file of the target cluster, or a directory of its per-stage files for a pipeline target (its device count must equal devices); default: the devices rule"`
	SourceStrategy string             `json:"source_strategy,omitempty" jsonschema:"format=path" description:"strategy file of a from directory, or a directory of per-stage strategy files, merged (default: strategy.ckpt, strategy.json or strategy/ in it)"`
	Model          string             `json:"model,omitempty" jsonschema:"enum=resnet20|resnet50|cnn|semi_auto_net|hybrid_net|wide_net" description:"the next training's model: with mode (and strategy), the target is exactly the layout that training's ranks hold, derived as npu/train derives it, and its strategy file is written"`
	Mode           parallel.Mode      `json:"mode,omitempty" description:"the next training's parallel mode (with model); auto_parallel is refused: its strategy is searched when the job starts (mspipe plan prints it; give it as strategy with semi_auto_parallel)"`
	Strategy       map[string][][]int `json:"strategy,omitempty" description:"the next training's shard strategy per operator (semi_auto_parallel, with model), as npu/train's strategy"`
	BatchSize      int                `json:"batch_size,omitempty" jsonschema:"minimum=1" description:"the next training's batch size per device (with model; default npu/train's)"`
	FullBatch      bool               `json:"full_batch,omitempty" description:"the next training's full_batch (with model)"`
	// The parallel optimizer changes what each rank of the next training
	// loads: its piece of every parameter whose update is split.
	ParallelOptimizer  bool `json:"parallel_optimizer,omitempty" description:"the next training's parallel_optimizer (with model; data_parallel or semi_auto_parallel): each rank gets only its piece of every parameter whose update the optimizer splits, and of its moments, as that training's ranks hold them, and the strategy file records opt_weight_shard_step and opt_weight_shard_size"`
	OptimizerShardSize int  `json:"optimizer_weight_shard_size,omitempty" jsonschema:"minimum=1" description:"the next training's optimizer_weight_shard_size (with parallel_optimizer; default: all the ranks that hold the same slice)"`
	// Pipeline stages change which parameters each rank of the next
	// training holds: only its stage's.
	PipelineStages int            `json:"pipeline_stages,omitempty" jsonschema:"minimum=1" description:"the next training's pipeline_stages (with model; semi_auto_parallel): the target is that many stages of devices / pipeline_stages ranks, each rank holding the slices of its stage's parameters only, and the strategy file is the stages' files merged"`
	MicroSize      int            `json:"micro_size,omitempty" jsonschema:"minimum=1" description:"the next training's micro_size (with pipeline_stages): the strategy is checked on one micro-batch, as that training lays it out"`
	PipelineStage  map[string]int `json:"pipeline_stage,omitempty" description:"the next training's pipeline_stage (with pipeline_stages): which stage an operator starts; default: the cut npu/train makes"`
	Prefix         string         `json:"prefix,omitempty" jsonschema:"pattern=^[A-Za-z0-9_.]+$" description:"checkpoint prefix of the files read and written"`
	BNStats        string         `json:"bn_stats,omitempty" jsonschema:"enum=rank0|mean" description:"value of a tensor every source rank holds whole with different values: rank 0's, or the mean"`
	MaxMemory      string         `json:"max_memory,omitempty" description:"hard cap on the tensor data held in memory, e.g. 512MiB"`
	Workers        int            `json:"workers,omitempty" jsonschema:"minimum=0" description:"parallel reads and writes (0: one per CPU)"`
	Indivisible    string         `json:"indivisible,omitempty" jsonschema:"enum=refuse|split|replicate" description:"without target_strategy, a split dimension that does not divide by devices: refuse (say which device counts divide), split (uneven slices as numpy.array_split; the manifest records them, no strategy file is written) or replicate (whole on every rank)"`
	CRCCheck       bool           `json:"crc_check,omitempty" description:"append MindSpore's crc_num trailer to every file (save_checkpoint's crc_check); off, as in MindSpore, the files are plain protobuf every MindSpore version reads, and the manifest's crc32 proves them"`
}

func defaults() With {
	return With{Prefix: ckpt.DefaultPrefix, BNStats: engine.RuleRank0, MaxMemory: "512MiB", Indivisible: engine.IndivisibleRefuse}
}

// Info registers the stage as a built-in.
func Info() plugins.Info { return plugins.Info{Name: Name, New: New} }

// New returns the stage.
func New() plugins.Stage {
	return sdk.Stage[With]{
		Name:        Name,
		Version:     version,
		Description: "Reshard a checkpoint for a new number of devices and strategy: N slices to M slices by box intersection, optimizer state included",
		Defaults:    defaults(),
		Outputs: []plugins.OutputSpec{
			{Name: "checkpoints", Type: plugins.TypePath, Description: "directory holding device{i}/ckpt_{i}/ for every target rank"},
			{Name: "strategy", Type: plugins.TypePath, Description: "the target strategy file (strategy.ckpt); \"\" when tensors were split unevenly, which no strategy file describes"},
			{Name: "manifest", Type: plugins.TypePath, Description: "manifest.json: content hash and boxes of every tensor"},
			{Name: "devices", Type: plugins.TypeInt},
		},
		Check:   check,
		Execute: execute,
	}
}

func check(w With) []plugins.Problem {
	var p []plugins.Problem
	if w.Model == "" {
		for field, set := range map[string]bool{"mode": w.Mode != parallel.StandAlone, "strategy": len(w.Strategy) > 0, "batch_size": w.BatchSize != 0, "full_batch": w.FullBatch, "parallel_optimizer": w.ParallelOptimizer, "pipeline_stages": w.PipelineStages > 1} {
			if set {
				p = append(p, plugins.Problem{Path: "/" + field, Message: field + " describes the next training's layout: give its model too"})
			}
		}
	}
	if w.Model != "" && w.TargetStrategy != "" {
		p = append(p, plugins.Problem{Path: "/target_strategy", Message: "give the target as model (with mode and strategy) or as target_strategy, not both"})
	}
	if w.Model != "" && w.Mode == parallel.AutoParallel {
		p = append(p, plugins.Problem{Path: "/mode", Message: "auto_parallel searches its strategy when the job starts; run mspipe plan on the next training, then give the strategy it prints here and there with mode semi_auto_parallel"})
	}
	switch {
	case w.OptimizerShardSize != 0 && !w.ParallelOptimizer:
		p = append(p, plugins.Problem{Path: "/optimizer_weight_shard_size", Message: "optimizer_weight_shard_size needs parallel_optimizer: true"})
	case w.OptimizerShardSize != 0 && w.Devices > 0 && w.Devices%w.OptimizerShardSize != 0:
		p = append(p, plugins.Problem{Path: "/optimizer_weight_shard_size", Message: fmt.Sprintf("optimizer_weight_shard_size %d does not divide the %d devices", w.OptimizerShardSize, w.Devices)})
	}
	switch {
	case w.PipelineStages < 2 && (w.MicroSize > 1 || w.PipelineStage != nil):
		p = append(p, plugins.Problem{Path: "/pipeline_stages", Message: "micro_size and pipeline_stage describe a pipeline training: give its pipeline_stages (2 or more) too"})
	case w.PipelineStages > 1 && w.Devices > 0 && w.Devices%w.PipelineStages != 0:
		p = append(p, plugins.Problem{Path: "/pipeline_stages", Message: fmt.Sprintf("%d pipeline stages do not divide the %d devices", w.PipelineStages, w.Devices)})
	}
	if w.Model != "" && w.ParallelOptimizer && (w.Mode == parallel.StandAlone || w.Mode == parallel.HybridParallel) {
		p = append(p, plugins.Problem{Path: "/parallel_optimizer", Message: fmt.Sprintf("the parallel optimizer is for data_parallel and semi_auto_parallel, not %s", w.Mode)})
	}
	if _, err := bytesize.Parse(w.MaxMemory); err != nil {
		p = append(p, plugins.Problem{Path: "/max_memory", Message: err.Error()})
	}
	if err := engine.CheckRanks(w.Devices); err != nil {
		p = append(p, plugins.Problem{Path: "/devices", Message: err.Error()})
	}
	sort.Slice(p, func(i, j int) bool { return p[i].Path < p[j].Path })
	return p
}

func execute(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	mem, err := bytesize.Parse(w.MaxMemory)
	if err != nil {
		return nil, fmt.Errorf("max_memory: %w", err)
	}
	if _, err := os.Stat(w.From); err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	if err := engine.CheckRanks(w.Devices); err != nil {
		return nil, fmt.Errorf("devices: %w", err)
	}
	set, in, err := ckptset.Load([]string{w.From}, w.Prefix, w.SourceStrategy)
	if err != nil {
		return nil, err
	}
	var target engine.Target
	var layout *parallel.StrategyFile
	switch {
	case w.Model != "":
		job := ckptset.Job{Model: w.Model, Mode: w.Mode, Strategy: parallel.Strategy(w.Strategy), Devices: w.Devices, BatchPerDevice: w.BatchSize, FullBatch: w.FullBatch,
			ParallelOptimizer: w.ParallelOptimizer, OptimizerShardSize: w.OptimizerShardSize,
			PipelineStages: w.PipelineStages, MicroSize: w.MicroSize, PipelineStage: w.PipelineStage}
		if target, layout, err = set.TargetFor(job); err != nil {
			return nil, err
		}
		pieces := ""
		if w.ParallelOptimizer {
			split := 0
			for _, l := range layout.Layouts {
				if l.OptWeightShardSize > 0 {
					split++
				}
			}
			pieces = fmt.Sprintf(", with the parallel optimizer: %d parameters in pieces", split)
		}
		if w.PipelineStages > 1 {
			pieces += fmt.Sprintf(", in %d pipeline stages of %d devices", w.PipelineStages, target.Ranks/w.PipelineStages)
		}
		sc.Info(fmt.Sprintf("target: the layout of %s in %s on %d devices, as that training lays it out%s", w.Model, w.Mode, target.Ranks, pieces))
	case w.TargetStrategy == "":
		var uneven []string
		if target, uneven, err = engine.DevicesTarget(set.Source, w.Devices, w.Indivisible); err != nil {
			return nil, err
		}
		layout = set.StrategyForDevices(w.Devices)
		if len(uneven) > 0 {
			layout = nil
			sc.Info(fmt.Sprintf("%d tensors split unevenly (%s): the manifest records their slices; no strategy file, which cannot describe them", len(uneven), strings.Join(uneven, ", ")))
		}
	default:
		if layout, err = parallel.ReadStrategies(w.TargetStrategy); err != nil {
			return nil, fmt.Errorf("target_strategy: %w", err)
		}
		if target, err = set.Target(layout); err != nil {
			return nil, fmt.Errorf("target_strategy %s: %w", w.TargetStrategy, err)
		}
		if target.Ranks != w.Devices {
			return nil, fmt.Errorf("target_strategy %s is for %d devices, devices is %d", w.TargetStrategy, target.Ranks, w.Devices)
		}
	}
	target.Files = ckptset.TargetFiles(target.Ranks, w.Prefix, in.Files[0])
	opt := engine.Options{MaxMemory: mem, Workers: w.Workers, ReplicatedRule: w.BNStats, VerifyCRC: true, CRC: w.CRCCheck}
	plan, err := engine.Plan(ctx, set.Source, target, opt)
	if err != nil {
		return nil, err
	}
	split := 0
	for _, t := range plan.Tensors {
		if t.Rule == engine.RuleSplit {
			split++
		}
	}
	sc.Info(fmt.Sprintf("resharding %d ranks of %s to %d devices: %d of %d tensors split; %s",
		len(in.Files), w.From, target.Ranks, split, len(plan.Tensors), engine.SizeSummary(plan)))
	// A link planted in the work dir would take the rank files out.
	outDir, err := userfile.WritableWithin(sc.WorkDir(), "checkpoints")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	opt.Progress = func(written, total int64) {
		sc.Progress(written, total, "bytes", fmt.Sprintf("writing %d rank files", target.Ranks))
	}
	// The work dir is the stage's own: an earlier attempt's set there is
	// replaced whole.
	m, err := ckptset.Reshard(ctx, set, in, target, layout, outDir, true, opt)
	if err != nil {
		return nil, err
	}
	sc.Info(fmt.Sprintf("wrote %d rank files under %s; every tensor's content hash equals the source's", len(m.Files), outDir))
	if s := m.Stats; s != nil {
		sc.Metric("read_bytes", float64(s.ReadBytes), 0)
		sc.Metric("peak_memory", float64(s.PeakMemory), 0)
	}
	strategy := ""
	if layout != nil {
		strategy = filepath.Join(outDir, ckptset.StrategyNames[0])
	}
	return map[string]any{
		"checkpoints": outDir,
		"strategy":    strategy,
		"manifest":    filepath.Join(outDir, engine.ManifestName),
		"devices":     target.Ranks,
	}, nil
}
