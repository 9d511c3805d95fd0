package trainer

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A job whose init is a checkpoint of the same training (InitResumes)
// picks up after the step the file's name gives, with the global step,
// the learning rate and the data position going on: from step 3 of the
// first epoch it ends with the uninterrupted training's last checkpoint,
// bit for bit, under the same name. An init whose name does not say the
// step is refused.
func TestInitResumesContinuesTheTraining(t *testing.T) {
	dataDir := tinyData(t, 16) // 80 images: 10 steps of 8 per epoch
	whole := t.TempDir()
	cfg := tinyConfig(dataDir, whole)
	cfg.Model, cfg.Schedule = "cnn", "cosine"
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := readAll(t, whole)

	cont := cfg
	cont.CkptDir = t.TempDir()
	cont.Init, cont.InitResumes = filepath.Join(whole, "CKP-1_3.ckpt"), true
	got, err := Train(context.Background(), cont)
	if err != nil {
		t.Fatal(err)
	}
	if got.GlobalStep != res.GlobalStep || got.Steps != res.Steps-3 {
		t.Errorf("global step %d after %d steps, want %d after %d", got.GlobalStep, got.Steps, res.GlobalStep, res.Steps-3)
	}
	last := filepath.Base(res.Checkpoint)
	if gotFiles := readAll(t, cont.CkptDir); !bytes.Equal(gotFiles[last], want[last]) {
		t.Errorf("%s differs from the uninterrupted training's (files %d)", last, len(gotFiles))
	}

	renamed := filepath.Join(t.TempDir(), "start.ckpt")
	data, err := os.ReadFile(cont.Init)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(renamed, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cont.Init, cont.CkptDir = renamed, t.TempDir()
	if _, err := Train(context.Background(), cont); err == nil || !strings.Contains(err.Error(), "its name does not say where the training was") {
		t.Errorf("init start.ckpt: %v", err)
	}
}
