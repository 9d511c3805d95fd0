package ckpt

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An asynchronous write commits the same bytes as a synchronous one, is
// counted by Latest only once waited for, and holds one checkpoint staged.
func TestAsyncSaveCommitsOnWait(t *testing.T) {
	syncDir, asyncDir := t.TempDir(), t.TempDir()
	cfg := CheckpointConfig{KeepCheckpointMax: 2, Write: WriteOptions{Digest: true}}
	sm, err := NewModelCheckpoint("", syncDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AsyncSave = true
	am, err := NewModelCheckpoint("", asyncDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 3; step++ {
		for _, m := range []*ModelCheckpoint{sm, am} {
			if _, err := m.StepEnd(1, step, 10, params(t, float32(step))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := am.Latest(); got != filepath.Join(asyncDir, "CKP-1_2.ckpt") {
		t.Errorf("Latest before Wait = %q, want the last committed CKP-1_2.ckpt", got)
	}
	if _, err := am.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := am.Latest(); got != filepath.Join(asyncDir, "CKP-1_3.ckpt") {
		t.Errorf("Latest after Wait = %q, want CKP-1_3.ckpt", got)
	}
	for _, name := range []string{"CKP-1_2.ckpt", "CKP-1_3.ckpt", "CKP-1_3.ckpt" + DigestExt} {
		a, _ := os.ReadFile(filepath.Join(syncDir, name))
		b, err := os.ReadFile(filepath.Join(asyncDir, name))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: async differs from sync (%v)", name, err)
		}
	}
	if names := dirNames(t, asyncDir); len(names) != 4 {
		t.Errorf("kept %v, want two checkpoints and their sidecars", names)
	}
	if am.PeakStaged() != 4 || sm.PeakStaged() != 0 {
		t.Errorf("staged peak %d (async), %d (sync); want one 4-byte checkpoint and 0", am.PeakStaged(), sm.PeakStaged())
	}
}

// A failed asynchronous write is reported by the next save, naming the file.
func TestAsyncSaveReportsTheFailedFile(t *testing.T) {
	dir := t.TempDir()
	// A directory where the checkpoint goes makes its rename fail.
	if err := os.Mkdir(filepath.Join(dir, "CKP-1_1.ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := NewModelCheckpoint("", dir, CheckpointConfig{AsyncSave: true, ReusePrefix: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.StepEnd(1, 1, 10, params(t, 1)); err != nil {
		t.Fatalf("the write is handed over, its error comes later: %v", err)
	}
	_, err = m.StepEnd(1, 2, 10, params(t, 2))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "CKP-1_1.ckpt")) {
		t.Errorf("next save: %v, want the failed write naming CKP-1_1.ckpt", err)
	}
	if m.Latest() != "" {
		t.Errorf("Latest = %q after a failed write", m.Latest())
	}
}

// The breakpoint has MindSpore's name, its sidecar, and stays out of the
// series (not pruned, not Latest).
func TestSaveBreakpoint(t *testing.T) {
	dir := t.TempDir()
	m, err := NewModelCheckpoint("", dir, CheckpointConfig{KeepCheckpointMax: 1, Write: WriteOptions{Digest: true}})
	if err != nil {
		t.Fatal(err)
	}
	tensors, _ := params(t, 7)()
	path, err := m.SaveBreakpoint(2, 13, 10, tensors)
	if err != nil || path != filepath.Join(dir, "CKP-2_3_breakpoint.ckpt") {
		t.Fatalf("SaveBreakpoint = %q, %v", path, err)
	}
	if _, err := ReadVerified(path); err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 2; step++ {
		if _, err := m.StepEnd(1, step, 10, params(t, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("pruning removed the breakpoint: %v", err)
	}
	if p, _ := Latest(dir, ""); filepath.Base(p) != "CKP-1_2.ckpt" {
		t.Errorf("Latest = %s, want CKP-1_2.ckpt", p)
	}
}
