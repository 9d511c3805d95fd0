package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Binaries built once by TestMain.
var (
	mspipeBin     string
	testPlugin    string
	augmentPlugin string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mspipe-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mspipeBin = filepath.Join(dir, "mspipe")
	testPlugin = filepath.Join(dir, "mspipe-stage-test")
	augmentPlugin = filepath.Join(dir, "mspipe-stage-cifar-augment")
	for out, pkg := range map[string]string{
		mspipeBin:     "../cmd/mspipe",
		testPlugin:    "../plugins/host/testdata/testplugin",
		augmentPlugin: "../examples/plugins/cifar-augment",
	} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			os.RemoveAll(dir)
			os.Exit(2)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// workspace is a directory a test runs mspipe in, with a tag in the
// environment of every process it starts so leftovers can be found.
type workspace struct {
	t   *testing.T
	dir string
	tag string
}

func newWorkspace(t *testing.T) *workspace {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	w := &workspace{t: t, dir: t.TempDir(), tag: hex.EncodeToString(b[:])}
	t.Cleanup(func() { w.killLeftovers() })
	return w
}

func (w *workspace) write(name, content string) string {
	w.t.Helper()
	path := filepath.Join(w.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return path
}

func (w *workspace) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, mspipeBin, args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), "MSPIPE_E2E_TAG="+w.tag, "MSPIPE_PLUGIN_PATH=", "XDG_CONFIG_HOME="+filepath.Join(w.dir, ".config"))
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs mspipe to completion (at most two minutes).
func (w *workspace) run(args ...string) result {
	w.t.Helper()
	return w.runFor(120, args...)
}

// runFor runs mspipe to completion, for at most the given seconds.
func (w *workspace) runFor(seconds int, args ...string) result {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second)
	defer cancel()
	cmd := w.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("mspipe %v: %v", args, err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// runState is the part of run.json the tests read.
type runState struct {
	ID     string
	Status string
	Stages map[string]struct {
		Status     string
		Attempts   int
		Started    *time.Time
		Outputs    map[string]any
		Reason     string
		CachedFrom string `json:"cached_from"`
	}
}

func (w *workspace) state(id string) runState {
	w.t.Helper()
	data, err := os.ReadFile(filepath.Join(w.dir, "runs", strings.TrimSpace(id), "run.json"))
	if err != nil {
		w.t.Fatal(err)
	}
	var st runState
	if err := json.Unmarshal(data, &st); err != nil {
		w.t.Fatalf("run.json: %v", err)
	}
	return st
}

func (w *workspace) statuses(id string) map[string]string {
	out := map[string]string{}
	for sid, s := range w.state(id).Stages {
		out[sid] = s.Status
	}
	return out
}

// taggedProcesses lists the pids of live processes carrying this
// workspace's tag in their environment (mspipe, plugins, their children).
func (w *workspace) taggedProcesses() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	needle := []byte("MSPIPE_E2E_TAG=" + w.tag)
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && bytes.Contains(st, []byte(") Z ")) {
			continue // a zombie is already dead; its parent has not reaped it yet
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitNoProcesses waits up to d for every tagged process to be gone.
func (w *workspace) waitNoProcesses(d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		pids := w.taggedProcesses()
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killLeftovers makes sure a failing test does not leak processes.
func (w *workspace) killLeftovers() {
	for _, pid := range w.taggedProcesses() {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	}
}
