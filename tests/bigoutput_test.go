package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A plugin's 100 MiB output string fails its stage with the reason (here
// the host's 16 MiB message limit; smaller outputs meet the 1 MiB output
// limit, see plugins.CheckOutputSize), and
// the run stays readable: run.json grew to 211 MB before, and resume, logs
// and report then refused the run ("file too large"). The plugin's log line
// that is not UTF-8 arrives with U+FFFD instead of failing the stage.
func TestHugeOutputKeepsTheRunReadable(t *testing.T) {
	w := newWorkspace(t)
	installTestPlugin(t, w)
	w.write("p.yaml", `version: 1
name: big
stages:
  big: {uses: test/plugin, with: {mode: big}}
`)
	r := w.run("run", "p.yaml")
	if r.code != 1 {
		t.Fatalf("run: exit %d, want 1\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	st := w.state(id)
	if big := st.Stages["big"]; big.Status != "failed" || !strings.Contains(big.Reason, "received message larger than max") ||
		!strings.Contains(big.Reason, "write large values to a file and output its path") {
		t.Errorf("stage big: %s, %q", big.Status, big.Reason)
	}
	fi, err := os.Stat(filepath.Join(w.dir, "runs", id, "run.json"))
	if err != nil || fi.Size() > 64<<10 {
		t.Fatalf("run.json: %v, %d bytes", err, fi.Size())
	}
	logs := w.run("logs", id)
	if logs.code != 0 || !strings.Contains(logs.stdout, "bytes \uFFFD that are not UTF-8") {
		t.Errorf("logs: exit %d\n%s%s", logs.code, logs.stdout, logs.stderr)
	}
	if rep := w.run("report", id); rep.code != 0 {
		t.Errorf("report: exit %d\n%s", rep.code, rep.stderr)
	}
	res := w.run("resume", id)
	if res.code != 1 || !strings.Contains(res.stderr, "write large values to a file") {
		t.Errorf("resume: exit %d, want 1 (the stage fails again)\n%s", res.code, res.stderr)
	}
}
