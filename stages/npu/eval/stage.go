// Package eval provides the npu/eval built-in stage: it loads a checkpoint
// into a model and measures accuracy and loss on the CIFAR-10 test batch,
// on one simulated device.
package eval

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name is the stage's `uses` name.
const Name = "npu/eval"

const version = "1.0.0"

// With is the stage's `with` block.
type With struct {
	Checkpoint string `json:"checkpoint" jsonschema:"minLength=1,format=path" description:"a .ckpt file, or a training stage's checkpoints directory (rank 0's newest checkpoint is used)"`
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
