package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeRun makes a run directory whose run.json names the given stage log
// path, as a user or another program might have edited it.
func writeRun(t *testing.T, logPath string) (runsDir string) {
	t.Helper()
	runsDir = t.TempDir()
	id := "20261124-120000-abcdef"
	dir := filepath.Join(runsDir, id)
	if err := os.MkdirAll(filepath.Join(dir, "stages", "s"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stages", "s", "stage.log"), []byte("the stage's own log\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := map[string]any{
		"version": 1, "id": id, "pipeline": "p", "spec_file": "p.yaml", "spec_dir": runsDir,
		"params": map[string]any{}, "status": "failed", "created": "2026-11-24T12:00:00Z",
		"updated": "2026-11-24T12:00:00Z", "order": []string{"s"},
		"stages": map[string]any{"s": map[string]any{"status": "failed", "uses": "exec", "reason": "exit 1", "log": logPath}},
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return runsDir
}

func TestLogsPrintsTheStageLog(t *testing.T) {
	runs := writeRun(t, "stages/s/stage.log")
	code, out, errOut := runCLI(t, "logs", "latest", "s", "--runs-dir", runs)
	if code != 0 || out != "the stage's own log\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// A log path in run.json that leaves the run directory is refused, never
// followed: `mspipe logs` must not print /etc/passwd.
func TestLogsStaysInTheRunDirectory(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("TOP SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, log := range []string{secret, "../../" + filepath.Base(filepath.Dir(secret)) + "/secret", "/dev/zero", "stages"} {
		runs := writeRun(t, log)
		code, out, errOut := runCLI(t, "logs", "latest", "s", "--runs-dir", runs)
		if code == 0 || strings.Contains(out, "TOP SECRET") {
			t.Errorf("log %q: exit %d, stdout %q: want a refusal", log, code, out)
		}
		if !strings.Contains(errOut, "outside") && !strings.Contains(errOut, "not a regular file") {
			t.Errorf("log %q: stderr %q should say why it was refused", log, errOut)
		}
		// The whole-run form prints the other logs and says why this one is not shown.
		code, out, _ = runCLI(t, "logs", "latest", "--runs-dir", runs)
		if code != 0 || strings.Contains(out, "TOP SECRET") || !strings.Contains(out, "log not shown") {
			t.Errorf("log %q, whole run: exit %d, stdout %q", log, code, out)
		}
	}
}

// A log rotated at its size cap is printed whole: stage.log.1, then
// stage.log.
func TestLogsPrintsTheRotatedPartFirst(t *testing.T) {
	runs := writeRun(t, "stages/s/stage.log")
	old := filepath.Join(runs, "20261124-120000-abcdef", "stages", "s", "stage.log.1")
	if err := os.WriteFile(old, []byte("the older part\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "logs", "latest", "s", "--runs-dir", runs)
	if want := "the older part\nthe stage's own log\n"; code != 0 || out != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
}

// setRunStatus rewrites the run's and stage s's status in run.json.
func setRunStatus(t *testing.T, runs, status string) {
	t.Helper()
	path := filepath.Join(runs, "20261124-120000-abcdef", "run.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	st["status"] = status
	st["stages"].(map[string]any)["s"].(map[string]any)["status"] = status
	if data, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestLogsOfARank: --rank N prints device{N}/train.log{N} of the stage;
// a rank without a log is an error.
func TestLogsOfARank(t *testing.T) {
	runs := writeRun(t, "stages/s/stage.log")
	dev := filepath.Join(runs, "20261124-120000-abcdef", "stages", "s", "device1")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "train.log1"), []byte("epoch: 1 step: 2, loss is 2.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "logs", "latest", "s", "--rank", "1", "--runs-dir", runs)
	if code != 0 || out != "epoch: 1 step: 2, loss is 2.1\n" {
		t.Fatalf("--rank 1: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "logs", "latest", "s", "--rank", "3", "--runs-dir", runs); code == 0 || !strings.Contains(errOut, "no log of rank 3") {
		t.Errorf("--rank 3: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := runCLI(t, "logs", "latest", "--rank", "1", "--runs-dir", runs); code != 2 {
		t.Errorf("--rank without a stage: exit %d, want 2", code)
	}
}

// TestLogsFollow: -f prints what a running stage appends and returns once
// the stage has ended.
func TestLogsFollow(t *testing.T) {
	runs := writeRun(t, "stages/s/stage.log")
	runDir := filepath.Join(runs, "20261124-120000-abcdef")
	setRunStatus(t, runs, "running")
	// A live owner: the run's lock held, as mspipe run holds it.
	lock, err := os.OpenFile(filepath.Join(runDir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI(t, "logs", "-f", "latest", "s", "--runs-dir", runs)
		done <- result{code, out, errOut}
	}()
	logPath := filepath.Join(runDir, "stages", "s", "stage.log")
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		time.Sleep(2 * followInterval)
		fmt.Fprintf(f, "line %d\n", i)
		select {
		case r := <-done:
			t.Fatalf("logs -f returned while the stage runs: %+v", r)
		default:
		}
	}
	f.Close()
	setRunStatus(t, runs, "failed")
	_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	select {
	case r := <-done:
		if want := "the stage's own log\nline 0\nline 1\nline 2\n"; r.code != 0 || r.out != want {
			t.Errorf("logs -f: exit %d, stdout %q, stderr %q; want %q", r.code, r.out, r.err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs -f did not return after the stage ended")
	}
}
