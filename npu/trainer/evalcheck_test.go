package trainer

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
)

// TestCheckpointReproducesEvaluation: the final checkpoint, loaded into a
// fresh model, evaluates exactly as the trained model did.
func TestCheckpointReproducesEvaluation(t *testing.T) {
	dataDir := tinyData(t, 8)
	cfg := tinyConfig(dataDir, t.TempDir())
	cfg.Eval = true
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tensors, err := ckpt.Read(filepath.Join(cfg.CkptDir, "CKP-2_5.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel("resnet20", 99, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := Restore(m, tensors, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	acc, loss, err := Evaluate(context.Background(), m, dataDir, 100)
	if err != nil {
		t.Fatal(err)
	}
	if acc != res.Accuracy || loss != res.EvalLoss {
		t.Errorf("restored model: accuracy %v loss %v; trained model: accuracy %v loss %v", acc, loss, res.Accuracy, res.EvalLoss)
	}
}
