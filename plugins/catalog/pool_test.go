package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
	"github.com/mspipe/mspipe/spec"
)

// poolCatalog is a catalog whose built-in "test/plugin" is served by the
// test plugin (it ignores the `__stage NAME` arguments), reusable or not.
func poolCatalog(t *testing.T, reusable bool) *Catalog {
	t.Helper()
	reg := host.NewRegistry()
	desc := plugins.Descriptor{Name: "test/plugin", Version: "0.1.0", Outputs: []plugins.OutputSpec{
		{Name: "greeting", Type: plugins.TypeString}, {Name: plugins.WildcardOutput, Type: plugins.TypeAny}}}
	if err := reg.Register(plugins.Info{Name: "test/plugin", Reusable: reusable,
		New: func() plugins.Stage { return &declaringStage{desc: desc} }}); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Resolver: &host.Resolver{Builtins: reg, Executable: testPlugin, SpecDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// runStage launches "test/plugin" for one stage, runs it in mode and
// returns the pid of the process that ran it (mode ok logs it) and the
// run's error.
func runStage(t *testing.T, c *Catalog, mode string) (pid int, runErr error) {
	t.Helper()
	ctx := context.Background()
	proc, err := c.Launch(ctx, &spec.Pipeline{}, &spec.Stage{ID: "s", Uses: "test/plugin"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, runErr = proc.Run(ctx, plugins.RunRequest{RunID: "r", StageID: "s", WorkDir: t.TempDir(), With: map[string]any{"mode": mode}},
		func(ev plugins.Event) {
			if ev.Log != nil && ev.Log.Message == "starting" {
				fmt.Sscan(fmt.Sprint(ev.Log.Fields["pid"]), &pid)
			}
		})
	if err := proc.Close(); err != nil {
		t.Fatal(err)
	}
	return pid, runErr
}

// gone reports whether process pid has ended and been reaped, waiting a
// little: Close returns once the process has exited.
func gone(pid int) bool {
	for range 100 {
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// A reusable built-in's process serves the next stage of its kind when the
// previous one ended cleanly; one whose run failed is stopped, never
// reused; Close stops the idle ones.
func TestCatalogReusesProcessOfReusableBuiltin(t *testing.T) {
	c := poolCatalog(t, true)
	first, err := runStage(t, c, "ok")
	if err != nil || first == 0 {
		t.Fatalf("first stage: pid %d, %v", first, err)
	}
	second, err := runStage(t, c, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if second != first {
		t.Errorf("second stage ran in process %d, want the first stage's %d, idle since", second, first)
	}

	if _, err := runStage(t, c, "no-such-mode"); err == nil {
		t.Fatal("a run in an unknown mode succeeded")
	}
	if !gone(first) {
		t.Errorf("process %d is still running after a failed run in it", first)
	}
	third, err := runStage(t, c, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if third == first || third == 0 {
		t.Errorf("after a failed run the next stage ran in process %d, want a new one (not %d)", third, first)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !gone(third) {
		t.Errorf("idle process %d still runs after Close", third)
	}
}

// A built-in that is not Reusable gets a process of its own per stage.
func TestCatalogStartsAProcessPerStageOfOtherBuiltins(t *testing.T) {
	c := poolCatalog(t, false)
	first, err := runStage(t, c, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if !gone(first) {
		t.Errorf("process %d still runs after its stage", first)
	}
	second, err := runStage(t, c, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Errorf("two stages ran in process %d", first)
	}
}

// A stage whose context ends (a timeout, Ctrl-C) stops its process, as a
// process of its own would be: the next stage gets a new one.
func TestCatalogCancelledStageIsNotReused(t *testing.T) {
	c := poolCatalog(t, true)
	first, err := runStage(t, c, "ok")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	proc, err := c.Launch(ctx, &spec.Pipeline{}, &spec.Stage{ID: "w", Uses: "test/plugin"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Run(ctx, plugins.RunRequest{RunID: "r", StageID: "w", WorkDir: t.TempDir(), With: map[string]any{"mode": "wait"}}, nil); err == nil {
		t.Fatal("a run that waits for its context succeeded")
	}
	_ = proc.Close()
	if !gone(first) {
		t.Errorf("process %d, whose stage was cancelled, still runs", first)
	}
	next, err := runStage(t, c, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if next == first {
		t.Errorf("the stage after a cancelled one ran in the cancelled one's process %d", first)
	}
}
