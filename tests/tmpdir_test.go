package tests

import (
	"os"
	"testing"
)

// A run leaves nothing in the temporary directory: every plugin launch
// used to leave its go-plugin socket there (/tmp/plugin<digits>), eleven
// after a ten-stage run. TMPDIR points at a directory of the test's own.
func TestRunLeavesNothingInTMPDIR(t *testing.T) {
	w := newWorkspace(t)
	// Short enough for plugin socket paths (at most 107 bytes) also when
	// TMPDIR is set deep down; removed when the test ends.
	tmp, err := os.MkdirTemp("/tmp", "mspipe-tmpdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp) // t.TempDir is not called again: it follows TMPDIR
	w.write("p.yaml", `version: 1
name: tmp
stages:
  a: {uses: exec, with: {command: "true"}}
  b: {uses: exec, needs: [a], with: {command: "echo b"}}
  c: {uses: exec, needs: [a], with: {command: "exit 3"}}
`)
	if r := w.run("run", "p.yaml"); r.code != 1 {
		t.Fatalf("run: exit %d, want 1 (stage c fails)\n%s", r.code, r.stderr)
	}
	if r := w.run("resume"); r.code != 1 {
		t.Fatalf("resume: exit %d, want 1\n%s", r.code, r.stderr)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in TMPDIR: %s", e.Name())
	}
}
