// Package integrate provides the ckpt/integrate built-in stage: it merges
// the per-rank checkpoint slices of a training stage (device{i}/ckpt_{i}/,
// the newest checkpoint of each rank) into one checkpoint holding every
// tensor whole, using the training's strategy file, as MindSpore's
// merge_sliced_parameter does, streaming under a memory cap (npu/reshard).
//
// Without a strategy file (with.strategy, or strategy.ckpt / strategy.json
// in the from directory) every tensor is taken as replicated, which is what
// a data-parallel run saves; bn_stats says which value a tensor whose
// copies differ gets (BatchNorm moving statistics are per device).
//
// The stage writes checkpoint/{prefix}-{epoch}_{step}.ckpt (rank 0's epoch
// and step) and checkpoint/manifest.json in its work directory; the
// manifest, written last, holds the content hash of every tensor, checked
// against the source before it is written. Progress is the bytes written.
package integrate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name is the stage's `uses` name.
const Name = "ckpt/integrate"

// version is part of every cache key: bump it when the output changes.
const version = "1.1.0"

// With is the stage's `with` block.
type With struct {
	From      string `json:"from" jsonschema:"minLength=1,format=path" description:"directory with device{i}/ckpt_{i}/ per rank (stages.train.outputs.checkpoints)"`
	Strategy  string `json:"strategy,omitempty" jsonschema:"format=path" description:"strategy file of the training, or a directory of its per-stage strategy files, merged (default: strategy.ckpt, strategy.json or strategy/ in from; none: every tensor replicated)"`
	Format    string `json:"format,omitempty" jsonschema:"enum=ckpt|safetensors" description:"ckpt, or safetensors: the verified .ckpt is converted (in memory) and kept beside it"`
	Prefix    string `json:"prefix,omitempty" jsonschema:"pattern=^[A-Za-z0-9_.]+$" description:"checkpoint prefix of the training"`
	BNStats   string `json:"bn_stats,omitempty" jsonschema:"enum=rank0|mean" description:"value of a tensor every rank holds whole with different values (data-parallel BatchNorm statistics): rank 0's, or the mean"`
	MaxMemory string `json:"max_memory,omitempty" description:"hard cap on the tensor data held in memory, e.g. 512MiB"`
	Workers   int    `json:"workers,omitempty" jsonschema:"minimum=0" description:"parallel reads and writes (0: one per CPU)"`
	CRCCheck  bool   `json:"crc_check,omitempty" description:"append MindSpore's crc_num trailer (save_checkpoint's crc_check); off, as in MindSpore, the file is plain protobuf every MindSpore version reads, and the manifest's crc32 proves it"`
}

func defaults() With {
	return With{Format: "ckpt", Prefix: ckpt.DefaultPrefix, BNStats: reshard.RuleRank0, MaxMemory: "512MiB"}
}

// Info registers the stage as a built-in.
func Info() plugins.Info { return plugins.Info{Name: Name, New: New} }

// New returns the stage.
func New() plugins.Stage {
	return sdk.Stage[With]{
		Name:        Name,
		Version:     version,
		Description: "Integrate (merge) the per-rank checkpoint slices of a parallel run into one complete checkpoint, using the run's strategy file",
		Defaults:    defaults(),
		Outputs: []plugins.OutputSpec{
			{Name: "checkpoint", Type: plugins.TypePath, Description: "the integrated checkpoint file"},
			{Name: "manifest", Type: plugins.TypePath, Description: "manifest.json: content hash of every tensor"},
			{Name: "tensors", Type: plugins.TypeInt, Description: "tensors in the checkpoint"},
			{Name: "bytes", Type: plugins.TypeInt, Description: "tensor data bytes"},
		},
		Check:   check,
		Execute: execute,
	}
}

func check(w With) []plugins.Problem {
	if _, err := bytesize.Parse(w.MaxMemory); err != nil {
		return []plugins.Problem{{Path: "/max_memory", Message: err.Error()}}
	}
	return nil
}

func execute(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	mem, err := bytesize.Parse(w.MaxMemory)
	if err != nil {
		return nil, fmt.Errorf("max_memory: %w", err)
	}
	st, err := os.Stat(w.From)
	if err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("from: %s is a file; give the training's checkpoints directory (device{i}/ckpt_{i}/ per rank)", w.From)
	}
	set, in, err := ckptset.Load([]string{w.From}, w.Prefix, w.Strategy)
	if err != nil {
		return nil, err
	}
	layout := "no strategy file: every tensor replicated, bn_stats " + w.BNStats
	switch {
	case in.Manifest:
		layout = "layout from its " + reshard.ManifestName
	case in.Strategy != "":
		layout = "layout from " + in.Strategy
	}
	opt := reshard.Options{MaxMemory: mem, Workers: w.Workers, ReplicatedRule: w.BNStats, VerifyCRC: true, CRC: w.CRCCheck}
	// A link planted in the work dir would take the checkpoint out.
	outDir, err := userfile.WritableWithin(sc.WorkDir(), "checkpoint")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	name := ckptset.FileName(w.Prefix, in.Files[0])
	plan, err := reshard.Plan(ctx, set.Source, reshard.Target{Ranks: 1, Files: []string{name}}, opt)
	if err != nil {
		return nil, err
	}
	sc.Info(fmt.Sprintf("integrating %d ranks of %s (%s): %s",
		len(in.Files), w.From, layout, reshard.SizeSummary(plan)))
	opt.Progress = func(written, total int64) {
		sc.Progress(written, total, "bytes", "writing "+name)
	}
	// The work dir is the stage's own: an earlier attempt's output there
	// is replaced.
	m, err := ckptset.Merge(ctx, set, in, filepath.Join(outDir, name), true, opt)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(outDir, name)
	if w.Format == "safetensors" {
		tensors, err := ckpt.Read(out)
		if err != nil {
			return nil, err
		}
		st := filepath.Join(outDir, strings.TrimSuffix(name, ".ckpt")+ckpt.SafetensorsExt)
		if err := ckpt.WriteSafetensors(st, tensors, nil); err != nil {
			return nil, err
		}
		out = st
	}
	var bytes int64
	for _, t := range m.Tensors {
		bytes += t.Bytes
	}
	sc.Info(fmt.Sprintf("wrote %s: %d tensors, %d data bytes, every content hash equal to the source's", out, len(m.Tensors), bytes))
	if s := m.Stats; s != nil {
		sc.Metric("read_bytes", float64(s.ReadBytes), 0)
		sc.Metric("peak_memory", float64(s.PeakMemory), 0)
	}
	if err := sc.Artifact("checkpoint", out); err != nil {
		return nil, err
	}
	return map[string]any{
		"checkpoint": out,
		"manifest":   filepath.Join(outDir, reshard.ManifestName),
		"tensors":    len(m.Tensors),
		"bytes":      bytes,
	}, nil
}
