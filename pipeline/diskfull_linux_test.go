package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

// tinyDisk mounts a tmpfs of size bytes on a new directory, or skips the
// test (saying why) where mounting is not allowed.
func tinyDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes to path until the disk is full.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
}

// TestDiskFullRunKeepsItsEnd: a stage that fills the disk fails, and
// run.json still says the run failed and why (before, it said "running"
// forever: no new run.json fitted on the disk).
func TestDiskFullRunKeepsItsEnd(t *testing.T) {
	w := newWorkspace(t)
	w.store.Dir = filepath.Join(tinyDisk(t, "4m"), "runs")
	l := &scriptLauncher{run: func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		if err := fill(filepath.Join(c.req.WorkDir, "big")); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("filling the disk: %v", err)
		}
		return nil, errors.New("no space left on device")
	}}
	st, err := w.run(w.engine(l), "version: 1\nname: full\nstages:\n  a: {uses: work}\n  b: {uses: work, needs: a}\n")
	if !errors.Is(err, ErrStageFailed) {
		t.Fatalf("run: %v, want the stage failure", err)
	}
	saved, err := LoadState(filepath.Join(w.store.Dir, st.ID))
	if err != nil {
		t.Fatalf("run.json after the disk filled: %v", err)
	}
	if saved.Status != StatusFailed || !strings.Contains(saved.Error, "stage a failed: no space left on device") {
		t.Errorf("run.json: status %s, error %q; want failed with the stage's error", saved.Status, saved.Error)
	}
	if a := saved.Stages["a"]; a.Status != StatusFailed || saved.Finished == nil {
		t.Errorf("run.json: a %s, finished %v", a.Status, saved.Finished)
	}
}

// TestDiskFullAtStartLeavesNoRunDirectory: a run that cannot start because
// the disk is full leaves no empty run directory behind.
func TestDiskFullAtStartLeavesNoRunDirectory(t *testing.T) {
	disk := tinyDisk(t, "64k")
	w := newWorkspace(t)
	w.store.Dir = filepath.Join(disk, "runs")
	if err := os.MkdirAll(w.store.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fill(filepath.Join(disk, "big")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v", err)
	}
	src := "version: 1\nname: full\nstages:\n  a: {uses: work}\n"
	p := w.load(src)
	l := &scriptLauncher{}
	if _, err := w.engine(l).Run(context.Background(), p, []byte(src), nil); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("run: %v, want no space left", err)
	}
	entries, err := os.ReadDir(w.store.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
	if len(l.ran()) != 0 {
		t.Errorf("ran %v", l.ran())
	}
}

// TestNearlyFullDiskRefusesToStart: with less free space than the reserve
// a run needs to record its end, Run refuses before any stage, saying
// why, and leaves no run directory.
func TestNearlyFullDiskRefusesToStart(t *testing.T) {
	disk := tinyDisk(t, "4m")
	w := newWorkspace(t)
	w.store.Dir = filepath.Join(disk, "runs")
	if err := os.WriteFile(filepath.Join(disk, "big"), make([]byte, 3<<20+512<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	src := "version: 1\nname: nearly\nstages:\n  a: {uses: work}\n"
	p := w.load(src)
	l := &scriptLauncher{}
	_, err := w.engine(l).Run(context.Background(), p, []byte(src), nil)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "reserve 1.0 MiB for run.json") {
		t.Fatalf("run: %v, want the reserve refused", err)
	}
	entries, _ := os.ReadDir(w.store.Dir)
	for _, e := range entries {
		t.Errorf("left behind: %s", e.Name())
	}
	if len(l.ran()) != 0 {
		t.Errorf("ran %v", l.ran())
	}
}
