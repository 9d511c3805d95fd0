package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/internal/testutil/gobuild"

	"github.com/mspipe/mspipe/plugins"
)

// testPlugin is the path of testdata/testplugin, built once by TestMain.
// It is written only there, before any test runs.
var testPlugin string

func TestMain(m *testing.M) {
	gobuild.Main(m, "./testdata/testplugin", "mspipe-stage-test-plugin", &testPlugin)
}

// syncBuffer is a stage log that tests read while the plugin writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func launchTest(t *testing.T, ctx context.Context, cfg LaunchConfig) (*Client, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	if cfg.Path == "" {
		cfg.Path = testPlugin
	}
	cfg.Log = log
	c, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatalf("Launch: %v\nstage log:\n%s", err, log)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c, log
}

// processGone reports whether pid no longer runs (absent or a zombie).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(fields) == 0 || fields[0] == "Z" || fields[0] == "X"
}

func TestLaunchRunHappyPath(t *testing.T) {
	ctx := context.Background()
	c, log := launchTest(t, ctx, LaunchConfig{Name: "test/plugin"})
	d, err := c.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "test/plugin" || d.Version != "0.1.0" || len(d.Outputs) != 4 || !bytes.Contains(d.WithSchema, []byte(`"enum"`)) {
		t.Errorf("descriptor = %+v", d)
	}
	// The SDK reports a value of the wrong type (schema keywords such as
	// the enum are mspipe's to check).
	problems, err := c.Validate(ctx, plugins.ValidateRequest{With: map[string]any{"mode": 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].Path != "/mode" {
		t.Errorf("problems for mode 3 = %v, want one at /mode", problems)
	}

	work := t.TempDir()
	var events []plugins.Event
	outputs, err := c.Run(ctx, plugins.RunRequest{RunID: "r1", StageID: "s1", WorkDir: work, Attempt: 1,
		With: map[string]any{"mode": "ok", "name": "npu"}}, func(e plugins.Event) { events = append(events, e) })
	if err != nil {
		t.Fatalf("Run: %v\nstage log:\n%s", err, log)
	}
	want := map[string]any{"greeting": "hello npu", "count": int64(3), "ratio": 2.0, "file": "result.txt"}
	if fmt.Sprint(outputs) != fmt.Sprint(want) {
		t.Errorf("outputs = %#v, want %#v", outputs, want)
	}
	if _, isFloat := outputs["ratio"].(float64); !isFloat {
		t.Errorf("ratio is %T, want float64", outputs["ratio"])
	}
	var kinds []string
	for _, e := range events {
		switch {
		case e.Log != nil:
			kinds = append(kinds, "log:"+e.Log.Message)
			if e.Log.Fields["pid"] != int64(c.Pid()) {
				t.Errorf("log field pid = %#v, want %d", e.Log.Fields["pid"], c.Pid())
			}
		case e.Progress != nil:
			kinds = append(kinds, fmt.Sprintf("progress:%d/%d", e.Progress.Done, e.Progress.Total))
		case e.Metric != nil:
			kinds = append(kinds, fmt.Sprintf("metric:%s=%v@%d", e.Metric.Name, e.Metric.Value, e.Metric.Step))
		case e.Artifact != nil:
			sum := sha256.Sum256([]byte("result\n"))
			if e.Artifact.SHA256 != fmt.Sprintf("%x", sum) {
				t.Errorf("artifact sha256 = %s", e.Artifact.SHA256)
			}
			kinds = append(kinds, "artifact:"+e.Artifact.Name)
		}
		if time.Since(e.Time) > time.Minute || e.Time.IsZero() {
			t.Errorf("event time %v", e.Time)
		}
	}
	if got := strings.Join(kinds, " "); got != "log:starting progress:1/2 metric:loss=0.5@7 artifact:result" {
		t.Errorf("events = %s", got)
	}
	// The plugin's stdout travels on its own stream, so it may lag the events.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), "plain stdout line"); {
		if time.Now().After(deadline) {
			t.Fatalf("plugin stdout missing from the stage log:\n%s", log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !processGone(c.Pid()) {
		t.Errorf("plugin %d still running after Close", c.Pid())
	}
	t.Logf("stage log:\n%s", log)
}

func TestRunCancelReachesPlugin(t *testing.T) {
	ctx := context.Background()
	c, _ := launchTest(t, ctx, LaunchConfig{})
	work := t.TempDir()
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(runCtx, plugins.RunRequest{WorkDir: work, With: map[string]any{"mode": "wait"}}, func(e plugins.Event) {
			if e.Log != nil && e.Log.Message == "waiting" {
				cancel()
			}
		})
		errc <- err
	}()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v, want context.Canceled", err)
	}
	marker := filepath.Join(work, "cancelled")
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(marker)
		if err == nil {
			if string(data) != "context canceled" {
				t.Errorf("plugin saw %q", data)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the plugin's context was not cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLaunchContextEndStopsPlugin(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, _ := launchTest(t, ctx, LaunchConfig{})
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for !processGone(c.Pid()) {
		if time.Now().After(deadline) {
			t.Fatalf("plugin %d still running after its launch context ended", c.Pid())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPluginPanics(t *testing.T) {
	ctx := context.Background()
	t.Run("in Run", func(t *testing.T) {
		c, _ := launchTest(t, ctx, LaunchConfig{})
		var stack string
		_, err := c.Run(ctx, plugins.RunRequest{WorkDir: t.TempDir(), With: map[string]any{"mode": "panic"}}, func(e plugins.Event) {
			if e.Log != nil && e.Log.Level == plugins.LevelError {
				stack, _ = e.Log.Fields["stack"].(string)
			}
		})
		t.Log(err)
		if err == nil || !strings.Contains(err.Error(), "stage panicked: boom in run (at main.go:") {
			t.Fatalf("err = %v, want the panic message and site", err)
		}
		if !strings.Contains(stack, "testplugin/main.go:") {
			t.Errorf("no stack trace in the events: %q", stack)
		}
	})
	t.Run("in a goroutine", func(t *testing.T) {
		c, _ := launchTest(t, ctx, LaunchConfig{})
		_, err := c.Run(ctx, plugins.RunRequest{WorkDir: t.TempDir(), With: map[string]any{"mode": "crash"}}, nil)
		t.Log(err)
		if !errors.Is(err, plugins.ErrPluginExited) {
			t.Fatalf("err = %v, want plugins.ErrPluginExited", err)
		}
		for _, want := range []string{"exit status 2", "panic: boom in goroutine", "main.go:"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want it to contain %q", err, want)
			}
		}
	})
}

func TestPluginExitsMidRun(t *testing.T) {
	ctx := context.Background()
	c, _ := launchTest(t, ctx, LaunchConfig{})
	_, err := c.Run(ctx, plugins.RunRequest{WorkDir: t.TempDir(), With: map[string]any{"mode": "exit"}}, nil)
	t.Log(err)
	if !errors.Is(err, plugins.ErrPluginExited) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want plugins.ErrPluginExited with exit status 3", err)
	}
	if _, err := c.Validate(ctx, plugins.ValidateRequest{}); !errors.Is(err, plugins.ErrPluginExited) {
		t.Errorf("Validate after the exit = %v, want plugins.ErrPluginExited", err)
	}
}

func TestHangingPluginIsKilled(t *testing.T) {
	ctx := context.Background()
	const grace = 300 * time.Millisecond
	c, _ := launchTest(t, ctx, LaunchConfig{Grace: grace})
	work := t.TempDir()
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Run(runCtx, plugins.RunRequest{WorkDir: work, With: map[string]any{"mode": "hang"}}, func(e plugins.Event) {
			if e.Log != nil && e.Log.Message == "ready" {
				cancel()
			}
		})
		errc <- err
	}()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	data, err := os.ReadFile(filepath.Join(work, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 || pids[0] != c.Pid() {
		t.Fatalf("pids file %q, plugin pid %d", data, c.Pid())
	}
	for _, pid := range pids {
		if processGone(pid) {
			t.Fatalf("process %d is gone before Close", pid)
		}
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// Both ignore SIGTERM, so only SIGKILL after the grace period ends them.
	if took < grace || took > grace+10*time.Second {
		t.Errorf("Close took %v with a grace of %v", took, grace)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d survived Close", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestNotAPlugin(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, body string
		wantErr    error
		wantText   []string
	}{
		{"talks", `echo "hello from a script"; sleep 30`, ErrNotPlugin, []string{`printed "hello from a script"`}},
		{"exits", `echo "oops" >&2; exit 4`, plugins.ErrPluginExited, []string{"before the handshake", "exit status 4", "oops"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Launch(context.Background(), LaunchConfig{Path: script(tt.name, tt.body), StartTimeout: 5 * time.Second})
			t.Log(err)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			for _, want := range tt.wantText {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to contain %q", err, want)
				}
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		_, err := Launch(context.Background(), LaunchConfig{Path: filepath.Join(dir, "nope")})
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want not exist", err)
		}
	})
}

func TestChecksumPin(t *testing.T) {
	data, err := os.ReadFile(testPlugin)
	if err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(data))
	ctx := context.Background()
	marker := filepath.Join(t.TempDir(), "started")
	env := []string{"TESTPLUGIN_MARKER=" + marker}

	t.Run("match", func(t *testing.T) {
		c, _ := launchTest(t, ctx, LaunchConfig{SHA256: "sha256:" + sum, Env: env})
		if c.Pid() == 0 {
			t.Fatal("no pid")
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("plugin did not start: %v", err)
		}
		os.Remove(marker)
	})
	t.Run("mismatch", func(t *testing.T) {
		wrong := strings.Repeat("0", 64)
		_, err := Launch(ctx, LaunchConfig{Path: testPlugin, SHA256: wrong, Env: env})
		t.Log(err)
		if !errors.Is(err, ErrChecksumMismatch) {
			t.Fatalf("err = %v, want ErrChecksumMismatch", err)
		}
		if !strings.Contains(err.Error(), sum) || !strings.Contains(err.Error(), wrong) {
			t.Errorf("err = %v, want both digests", err)
		}
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the binary ran despite the pin mismatch (marker: %v)", err)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		_, err := Launch(ctx, LaunchConfig{Path: testPlugin, SHA256: "sha256:xyz"})
		if err == nil || !strings.Contains(err.Error(), "want 64 hex digits") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestLaunchNameMismatch(t *testing.T) {
	_, err := Launch(context.Background(), LaunchConfig{Name: "other/stage", Path: testPlugin})
	if !errors.Is(err, plugins.ErrIncompatible) || !strings.Contains(err.Error(), `describes itself as "test/plugin"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestRunDirectlyPrintsHelp(t *testing.T) {
	cmd := exec.Command(testPlugin)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
		t.Fatalf("exit: %v", err)
	}
	for _, want := range []string{"is an mspipe stage plugin", `stage "test/plugin" version 0.1.0`, "mspipe-stage-test-plugin", `"uses: test/plugin"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// BenchmarkEmptyStage measures a whole plugin life: start, handshake,
// Describe, Run of a stage that does nothing, and stop.
func BenchmarkEmptyStage(b *testing.B) {
	ctx := context.Background()
	work := b.TempDir()
	req := plugins.RunRequest{WorkDir: work, With: map[string]any{"mode": "empty"}}
	for b.Loop() {
		c, err := Launch(ctx, LaunchConfig{Path: testPlugin})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Run(ctx, req, nil); err != nil {
			b.Fatal(err)
		}
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPluginLoggerDropsCleanExits: go-plugin's notice of a clean exit stays
// out of the stage log; an exit with an error and other notices stay in.
func TestPluginLoggerDropsCleanExits(t *testing.T) {
	var b bytes.Buffer
	l := pluginLogger(&b)
	l.Info("plugin process exited", "plugin", "/tmp/go-build1/b001/exe/mspipe", "id", 7)
	l.Error("plugin process exited", "plugin", "/tmp/go-build1/b001/exe/mspipe", "id", 8, "error", "exit status 2")
	l.Info("plugin says hello")
	l.Debug("starting plugin")
	got := b.String()
	if strings.Contains(got, "id=7") || !strings.Contains(got, "id=8") || !strings.Contains(got, "exit status 2") || !strings.Contains(got, "plugin says hello") {
		t.Errorf("stage log:\n%s\nwant the error exit and the hello, not the clean exit", got)
	}
	if strings.Contains(got, "starting plugin") {
		t.Errorf("a debug line reached the stage log:\n%s", got)
	}
}
