package host

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
)

// dirEntries lists dir's entries, recursively, as paths relative to it.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// shortTempDir is a fresh directory short enough to hold a plugin's
// socket directory (Unix socket paths take at most 107 bytes): the test's
// own temporary directory, or one in /tmp when that is too deep (a
// TMPDIR set deep down). Either is removed when the test ends.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if len(dir)+len("/mspipe-plugin-0123456789/plugin0123456789") <= maxSocketPath {
		return dir
	}
	dir, err := os.MkdirTemp("/tmp", "mspipe-sockets-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// go-plugin's socket lives in a private directory under TMPDIR while the
// plugin runs, and nothing is left there however the plugin ended: closed,
// exited mid-run, crashed, killed after ignoring SIGTERM.
func TestPluginSocketsLeaveNothing(t *testing.T) {
	tmp, work := shortTempDir(t), t.TempDir()
	t.Setenv("TMPDIR", tmp) // t.TempDir is not called again: it follows TMPDIR
	for _, mode := range []string{"ok", "exit", "crash", "hang"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			if err := os.Mkdir(filepath.Join(work, mode), 0o755); err != nil {
				t.Fatal(err)
			}
			log := &syncBuffer{}
			c, err := Launch(ctx, LaunchConfig{Path: testPlugin, Log: log, Grace: 200 * time.Millisecond})
			if err != nil {
				t.Fatalf("Launch: %v\n%s", err, log)
			}
			during := dirEntries(t, tmp)
			if len(during) != 2 || !strings.HasPrefix(during[0], "mspipe-plugin-") || !strings.HasPrefix(filepath.Base(during[1]), "plugin") {
				t.Errorf("TMPDIR holds %q while the plugin runs, want its socket in a directory of its own", during)
			}
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			_, _ = c.Run(runCtx, plugins.RunRequest{WorkDir: filepath.Join(work, mode), With: map[string]any{"mode": mode}}, func(e plugins.Event) {
				if e.Log != nil && e.Log.Message == "ready" {
					cancel()
				}
			})
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if left := dirEntries(t, tmp); len(left) != 0 {
				t.Errorf("after mode %s TMPDIR holds %q", mode, left)
			}
		})
	}
}

// A plugin that never completes the handshake leaves nothing either.
func TestFailedLaunchLeavesNoSocketDir(t *testing.T) {
	tmp, bin := shortTempDir(t), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	script := filepath.Join(bin, "not-a-plugin")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Launch(context.Background(), LaunchConfig{Path: script}); err == nil {
		t.Fatal("launched a script that is not a plugin")
	}
	if left := dirEntries(t, tmp); len(left) != 0 {
		t.Errorf("TMPDIR holds %q", left)
	}
}

// A TMPDIR too deep for a Unix socket path is refused with the reason.
func TestSocketDirTooLong(t *testing.T) {
	base := filepath.Join(t.TempDir(), strings.Repeat("d", 90))
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Launch(context.Background(), LaunchConfig{Path: testPlugin, SocketDir: base})
	if err == nil {
		_ = c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "Unix sockets take at most 107") {
		t.Fatalf("err = %v, want the socket path length refused", err)
	}
	if left := dirEntries(t, base); len(left) != 0 {
		t.Errorf("%s holds %q", base, left)
	}
}

// A socket directory left by an mspipe that was killed (its pid is gone)
// is removed by the next launch; those of live processes are kept.
func TestStaleSocketDirsAreRemoved(t *testing.T) {
	tmp := shortTempDir(t)
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tmp, fmt.Sprintf("mspipe-plugin-%d-1", gone.Process.Pid))
	live := filepath.Join(tmp, fmt.Sprintf("mspipe-plugin-%d-2", os.Getpid()))
	other := filepath.Join(tmp, "mspipe-plugin-notes")
	for _, d := range []string{stale, live, other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(stale, "plugin123"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Launch(context.Background(), LaunchConfig{Path: testPlugin})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	left := dirEntries(t, tmp)
	want := []string{filepath.Base(live), filepath.Base(other)}
	if !slices.Equal(left, want) {
		t.Errorf("TMPDIR holds %q, want %q (the dead process's directory removed)", left, want)
	}
}
