package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
