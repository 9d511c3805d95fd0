// Package reshard provides the ckpt/reshard built-in stage: it turns a
// checkpoint (an integrated file, or a set of per-rank slices with its
// strategy file) into a set for another number of devices, slice to slice
// by box intersection under a memory cap (npu/reshard), optimizer state
// included.
//
// The target is the layout of target_strategy when given, else npu/reshard's
// rule for `devices`: a tensor the source splits is split into equal slices
// along its first split dimension when that dimension divides, else held
// whole by every rank; replicated tensors stay replicated.
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
const version = "1.0.0"

// With is the stage's `with` block.
type With struct {
	From           string             `json:"from" jsonschema:"minLength=1" description:"an integrated checkpoint (stages.integrate.outputs.checkpoint), or a directory of per-rank slices (device{i}/ckpt_{i}/, or a reshard output)"`
	Devices        int                `json:"devices" jsonschema:"minimum=1,maximum=4096" description:"devices of the target cluster (at most 4096: each is an output file to plan and write)"`
	TargetStrategy string             `json:"target_strategy,omitempty" description:"strategy file of the target cluster (its device count must equal devices); default: the devices rule"`
	SourceStrategy string             `json:"source_strategy,omitempty" description:"strategy file of a from directory (default: strategy.ckpt or strategy.json in it)"`
	Strategy       map[string][][]int `json:"strategy,omitempty" description:"target shard strategy per operator (not implemented in this build: give target_strategy)"`
	Prefix         string             `json:"prefix,omitempty" jsonschema:"pattern=^[A-Za-z0-9_.]+$" description:"checkpoint prefix of the files read and written"`
	BNStats        string             `json:"bn_stats,omitempty" jsonschema:"enum=rank0|mean" description:"value of a tensor every source rank holds whole with different values: rank 0's, or the mean"`
	MaxMemory      string             `json:"max_memory,omitempty" description:"hard cap on the tensor data held in memory, e.g. 512MiB"`
	Workers        int                `json:"workers,omitempty" jsonschema:"minimum=0" description:"parallel reads and writes (0: one per CPU)"`
}

func defaults() With {
	return With{Prefix: ckpt.DefaultPrefix, BNStats: engine.RuleRank0, MaxMemory: "512MiB"}
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
			{Name: "strategy", Type: plugins.TypePath, Description: "the target strategy file (strategy.ckpt)"},
			{Name: "manifest", Type: plugins.TypePath, Description: "manifest.json: content hash and boxes of every tensor"},
			{Name: "devices", Type: plugins.TypeInt},
		},
		Check:   check,
		Execute: execute,
	}
}

func check(w With) []plugins.Problem {
	var p []plugins.Problem
	if len(w.Strategy) > 0 {
		p = append(p, plugins.Problem{Path: "/strategy", Message: "a target strategy per operator is not implemented in this build (it needs the model's operator-to-parameter map); give target_strategy, a strategy file"})
	}
	if _, err := ckptset.ParseSize(w.MaxMemory); err != nil {
		p = append(p, plugins.Problem{Path: "/max_memory", Message: err.Error()})
	}
	if err := engine.CheckRanks(w.Devices); err != nil {
		p = append(p, plugins.Problem{Path: "/devices", Message: err.Error()})
	}
	return p
}

func execute(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	mem, err := ckptset.ParseSize(w.MaxMemory)
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
	target := engine.TargetForDevices(set.Source, w.Devices)
	layout := set.StrategyForDevices(w.Devices)
	if w.TargetStrategy != "" {
		if layout, err = parallel.ReadStrategyFile(w.TargetStrategy); err != nil {
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
	opt := engine.Options{MaxMemory: mem, Workers: w.Workers, ReplicatedRule: w.BNStats, VerifyCRC: true}
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
	sc.Info(fmt.Sprintf("resharding %d ranks of %s to %d devices: %d of %d tensors split, %d bytes to read, %d to write, peak memory %d of %d",
		len(in.Files), w.From, target.Ranks, split, len(plan.Tensors), plan.ReadBytes, plan.WriteBytes, plan.PeakMemory, plan.MaxMemory))
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
	return map[string]any{
		"checkpoints": outDir,
		"strategy":    filepath.Join(outDir, ckptset.StrategyNames[0]),
		"manifest":    filepath.Join(outDir, engine.ManifestName),
		"devices":     target.Ranks,
	}, nil
}
