// Package eval provides the npu/eval built-in stage: it loads a checkpoint
// into a model and measures accuracy and loss on the CIFAR-10 test batch,
// on one simulated device. A reshard output (a set of per-rank slices with
// its manifest.json) is merged into whole tensors first.
package eval

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name is the stage's `uses` name.
const Name = "npu/eval"

const version = "1.1.0"

// With is the stage's `with` block.
type With struct {
	Checkpoint string `json:"checkpoint" jsonschema:"minLength=1,format=path" description:"a .ckpt file, a training stage's checkpoints directory (rank 0's newest checkpoint is used), or a ckpt/reshard output (its slices merged whole)"`
	Data       string `json:"data" jsonschema:"minLength=1,format=path" description:"cifar-10-batches-bin directory"`
	Model      string `json:"model,omitempty" jsonschema:"enum=resnet20|resnet50|cnn,default=resnet20"`
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
	model, err := trainer.NewModel(w.Model, 0, 0)
	if err != nil {
		return nil, err
	}
	defer model.Close()
	if err := trainer.Restore(model, tensors, trainer.RestoreOptions{}); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	sc.Info("evaluating " + file)
	acc, loss, err := trainer.Evaluate(ctx, model, w.Data, w.BatchSize)
	if err != nil {
		return nil, err
	}
	sc.Info(fmt.Sprintf("accuracy: %.4f, loss: %.4f", acc, loss))
	return map[string]any{"accuracy": acc, "loss": loss, "checkpoint": file}, nil
}

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
