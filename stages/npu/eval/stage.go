// Package eval provides the npu/eval built-in stage: it loads a checkpoint
// into a model and measures accuracy and loss on the CIFAR-10 test batch,
// on one simulated device. A reshard output (a set of per-rank slices with
// its manifest.json) is merged into whole tensors first. The models only
// the split engine builds (semi_auto_net, hybrid_net, wide_net) are built
// with npu/shard on that one device, where their layout is the whole
// tensors, so the same whole checkpoint restores into them.
package eval

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name is the stage's `uses` name.
const Name = "npu/eval"

const version = "1.2.0"

// With is the stage's `with` block.
type With struct {
	Checkpoint string `json:"checkpoint" jsonschema:"minLength=1,format=path" description:"a .ckpt file, a training stage's checkpoints directory (rank 0's newest checkpoint is used), or a ckpt/reshard output (its slices merged whole)"`
	Data       string `json:"data" jsonschema:"minLength=1,format=path" description:"cifar-10-batches-bin directory"`
	Model      string `json:"model,omitempty" jsonschema:"enum=resnet20|resnet50|cnn|semi_auto_net|hybrid_net|wide_net,default=resnet20"`
	BatchSize  int    `json:"batch_size,omitempty" jsonschema:"default=100,minimum=1"`
	Prefix     string `json:"prefix,omitempty" jsonschema:"default=CKP" description:"checkpoint prefix when checkpoint is a directory"`
}

// Info registers the stage as a built-in.
func Info() plugins.Info { return plugins.Info{Name: Name, New: New} }

// New returns the stage.
func New() plugins.Stage {
	return sdk.Stage[With]{
		Name:        Name,
		Version:     version,
		Description: "Evaluate a checkpoint on the CIFAR-10 test batch",
		Outputs: []plugins.OutputSpec{
			{Name: "accuracy", Type: plugins.TypeFloat, Description: "fraction of test images classified right"},
			{Name: "loss", Type: plugins.TypeFloat, Description: "mean test loss"},
			{Name: "checkpoint", Type: plugins.TypePath, Description: "the checkpoint file evaluated"},
		},
		Execute: execute,
	}
}

func execute(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	file, err := checkpointFile(w.Checkpoint, w.Prefix)
	if err != nil {
		return nil, err
	}
	if _, merr := os.Stat(filepath.Join(w.Checkpoint, reshard.ManifestName)); merr == nil {
		// Rank 0 of a resharded set may hold slices: evaluate the whole.
		if file, err = mergeSet(ctx, sc, w.Checkpoint, file); err != nil {
			return nil, err
		}
	}
	tensors, err := ckpt.Read(file)
	if err != nil {
		return nil, err
	}
	var acc, loss float64
	if job.UsesEngine(w.Model, parallel.StandAlone) {
		acc, loss, err = evaluateSplit(ctx, sc, w, file, tensors)
	} else {
		acc, loss, err = evaluateWhole(ctx, sc, w, file, tensors)
	}
	if err != nil {
		return nil, err
	}
	sc.Info(fmt.Sprintf("accuracy: %.4f, loss: %.4f", acc, loss))
	return map[string]any{"accuracy": acc, "loss": loss, "checkpoint": file}, nil
}

// evaluateWhole restores the checkpoint into the whole model npu/trainer
// builds and evaluates it.
func evaluateWhole(ctx context.Context, sc sdk.Context, w With, file string, tensors []ckpt.Tensor) (acc, loss float64, err error) {
	model, err := trainer.NewModel(w.Model, 0, 0)
	if err != nil {
		return 0, 0, err
	}
	defer model.Close()
	if err := trainer.Restore(model, tensors, trainer.RestoreOptions{}); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", file, err)
	}
	sc.Info("evaluating " + file)
	return trainer.Evaluate(ctx, model, w.Data, w.BatchSize)
}

// evaluateSplit builds a model of the split engine on one device, in the
// mode it runs there (stand_alone, or hybrid_parallel for a model that
// declares its own split), restores the whole checkpoint into it and
// evaluates it as the trainer does.
func evaluateSplit(ctx context.Context, sc sdk.Context, w With, file string, tensors []ckpt.Tensor) (acc, loss float64, err error) {
	mode := parallel.StandAlone
	if shard.CheckModelMode(w.Model, mode) != nil {
		mode = parallel.HybridParallel
	}
	net, err := shard.New(shard.Config{Model: w.Model, Mode: mode, Devices: 1, BatchPerDevice: w.BatchSize})
	if err != nil {
		return 0, 0, fmt.Errorf("build %s on one device: %w", w.Model, err)
	}
	defer net.Close()
	// On one device every layout is the whole tensor: Layouts makes Restore
	// say so by name and shape when a tensor does not fit.
	if err := trainer.Restore(namedNet{net, w.Model}, tensors, trainer.RestoreOptions{Layouts: net.Layouts()}); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", file, err)
	}
	sc.Info(fmt.Sprintf("evaluating %s (%s built whole on one device, %s)", file, w.Model, mode))
	return trainer.EvaluateSharded(ctx, net, w.Data, w.BatchSize)
}

// namedNet gives a split network the model name Restore reports.
type namedNet struct {
	*shard.Net
	name string
}

func (n namedNet) Name() string { return n.name }

// mergeSet merges the reshard output in dir into one checkpoint in the
// work directory, named as rank 0's file is.
func mergeSet(ctx context.Context, sc sdk.Context, dir, rank0 string) (string, error) {
	m, err := reshard.ReadManifest(dir)
	if err != nil {
		return "", err
	}
	out, err := userfile.WritableWithin(sc.WorkDir(), "merged")
	if err != nil {
		return "", fmt.Errorf("work dir: %w", err)
	}
	name := filepath.Base(rank0)
	if _, err := reshard.Merge(ctx, m.Source(dir), out, name, reshard.Options{}); err != nil {
		return "", fmt.Errorf("merge the slices of %s: %w", dir, err)
	}
	sc.Info(fmt.Sprintf("merged the %d ranks of %s into whole tensors", m.Ranks, dir))
	return filepath.Join(out, name), nil
}

// checkpointFile accepts a file, a ckpt_0 directory, or a training stage's
// directory holding device0/ckpt_0.
func checkpointFile(path, prefix string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if !st.IsDir() {
		return path, nil
	}
	for _, dir := range []string{filepath.Join(path, "device0", "ckpt_0"), path} {
		if f, err := ckpt.Latest(dir, prefix); err == nil {
			return f, nil
		}
	}
	return "", fmt.Errorf("checkpoint: no %s-*.ckpt in %s or its device0/ckpt_0", prefix, path)
}
