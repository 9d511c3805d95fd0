package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/plugins"
)

// hangGuard is how long a hashing call may take before the test calls it a
// hang. It is not a timing assertion: the calls under test finish at once
// or never.
const hangGuard = 30 * time.Second

// hashWithin runs hashPath in a goroutine and fails the test if it does not
// return before hangGuard (before the fix, /dev/zero and FIFOs hashed
// forever).
func hashWithin(t *testing.T, ctx context.Context, path string) (string, error) {
	t.Helper()
	type result struct {
		h   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := hashPath(ctx, path)
		done <- result{h, err}
	}()
	select {
	case r := <-done:
		return r.h, r.err
	case <-time.After(hangGuard):
		t.Fatalf("hashPath(%s) did not return", path)
	}
	return "", nil
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
}

// TestHashPathRefusesSpecialFiles: a device or FIFO, named directly or
// found in a directory tree, is refused with an error naming it and what
// it is, instead of being read forever.
func TestHashPathRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	treeFifo := filepath.Join(tree, "sub", "pipe")
	mkfifo(t, treeFifo)
	for _, tc := range []struct{ path, want string }{
		{"/dev/zero", "/dev/zero is a character device"},
		{fifo, fifo + " is a FIFO"},
		{tree, treeFifo + " is a FIFO"},
	} {
		_, err := hashWithin(t, context.Background(), tc.path)
		if !errors.Is(err, userfile.ErrNotRegular) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("hashPath(%s) = %v, want an error containing %q", tc.path, err, tc.want)
		}
	}
}

// TestHashPathSymlinkInTreeNotFollowed: a link inside a tree to a device
// is not read (and does not fail the tree).
func TestHashPathSymlinkInTreeNotFollowed(t *testing.T) {
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := hashWithin(t, context.Background(), tree)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(tree, "zero")); err != nil {
		t.Fatal(err)
	}
	after, err := hashWithin(t, context.Background(), tree)
	if err != nil || after != before {
		t.Fatalf("with a link to /dev/zero: %s, %v; want %s", after, err, before)
	}
}

// TestHashPathCancelled: hashing a large file stops with the context's
// error when the context is done.
func TestHashPathCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: 64 MiB of length, no disk.
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := hashWithin(t, ctx, path); !errors.Is(err, context.Canceled) {
		t.Fatalf("hash with a cancelled context: %v, want context.Canceled", err)
	}
}

// guarded runs f and fails the test if it does not return before hangGuard.
func guarded(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatalf("%s did not return", what)
	}
}

// TestStageOutputDevZeroFails: a stage whose path output names /dev/zero
// fails with a clear error instead of hashing forever.
func TestStageOutputDevZeroFails(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		return map[string]any{"dir": "/dev/zero"}, nil
	}}
	var st *RunState
	var err error
	guarded(t, "run", func() { st, err = w.run(w.engine(l), "version: 1\nname: z\nstages:\n  a: {uses: files}\n") })
	if err == nil || st.Stages["a"].Status != StatusFailed {
		t.Fatalf("run: %v, a %s; want failed", err, st.Stages["a"].Status)
	}
	if want := "output dir: /dev/zero is a character device, not a regular file"; st.Stages["a"].Reason != want {
		t.Errorf("reason %q, want %q", st.Stages["a"].Reason, want)
	}
}

// TestPathParamFIFO: a path param naming a FIFO fails plan and run with
// an error naming it, instead of waiting forever for a writer.
func TestPathParamFIFO(t *testing.T) {
	w := newWorkspace(t)
	fifo := filepath.Join(w.dir, "data")
	mkfifo(t, fifo)
	src := "version: 1\nname: f\nparams:\n  data: {type: path, default: data}\nstages:\n  a: {uses: work}\n"
	want := "param data: " + fifo + " is a FIFO, not a regular file"
	e := w.engine(&scriptLauncher{})
	p := w.load(src)
	var planned []PlannedStage
	var err error
	guarded(t, "plan", func() { planned, err = e.Plan(context.Background(), p, map[string]any{"data": "data"}) })
	if err != nil || len(planned) != 1 || planned[0].Action != "unknown" || planned[0].Detail != want {
		t.Errorf("plan: %+v, %v; want action unknown, detail %q", planned, err, want)
	}
	var st *RunState
	guarded(t, "run", func() { st, err = w.run(e, src) })
	if err == nil || st.Stages["a"].Status != StatusFailed || st.Stages["a"].Reason != want {
		t.Errorf("run: %v, a %s %q; want failed with %q", err, st.Stages["a"].Status, st.Stages["a"].Reason, want)
	}
}

// TestPlanCancelStopsHashing: a plan cancelled while a large path param
// is hashed returns the context's error, not a plan.
func TestPlanCancelStopsHashing(t *testing.T) {
	w := newWorkspace(t)
	f, err := os.Create(filepath.Join(w.dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p := w.load("version: 1\nname: c\nparams:\n  data: {type: path, default: big}\nstages:\n  a: {uses: work}\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	planned, err := w.engine(&scriptLauncher{}).Plan(ctx, p, map[string]any{"data": "big"})
	if !errors.Is(err, context.Canceled) || planned != nil {
		t.Fatalf("plan: %+v, %v; want context.Canceled", planned, err)
	}
}
