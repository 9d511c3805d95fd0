package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// execSpec uses the test plugin with a `with` its schema refuses (mode is an
// enum), so whether `with` was checked shows in the exit status. The next
// stage reads outputs the plugin declares and one it does not (the plugin
// has open-ended outputs), which must not be errors while the plugin is
// unchecked. %s is the uses value, %s the stage's extra lines.
const execSpec = `version: 1
name: untrusted
stages:
  t:
    uses: %s
%s    with: {mode: bogus}
  after:
    uses: exec
    needs: [t]
    if: "${{ stages.t.outputs.count > 2 }}"
    with: {command: "echo ${{ stages.t.outputs.greeting }} ${{ stages.t.outputs.anything }}"}
`

// runWithMarker runs mspipe with the test plugin's marker variable set, and
// reports whether the plugin was started.
func runWithMarker(w *workspace, env []string, args ...string) (result, bool) {
	w.t.Helper()
	marker := filepath.Join(w.dir, "started")
	_ = os.Remove(marker)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := w.command(ctx, args...)
	cmd.Env = append(append(cmd.Env, "TESTPLUGIN_MARKER="+marker), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("mspipe %v: %v", args, err)
	}
	_, statErr := os.Stat(marker)
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		w.t.Fatal(statErr)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}, statErr == nil
}

func TestValidateStartsOnlyPinnedPlugins(t *testing.T) {
	bin, err := os.ReadFile(testPlugin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	goodPin := "    sha256: " + hex.EncodeToString(sum[:]) + "\n"
	badPin := "    sha256: " + strings.Repeat("ab", 32) + "\n"

	for _, where := range []string{"path", "./plugins", "$MSPIPE_PLUGIN_PATH"} {
		t.Run(where, func(t *testing.T) {
			w := newWorkspace(t)
			uses, binPath := "test/plugin", ""
			var env []string
			switch where {
			case "path":
				uses, binPath = "./bin/tool", "bin/tool"
			case "./plugins":
				binPath = "plugins/mspipe-stage-test-plugin"
			case "$MSPIPE_PLUGIN_PATH":
				binPath = "elsewhere/mspipe-stage-test-plugin"
				env = []string{"MSPIPE_PLUGIN_PATH=" + filepath.Join(w.dir, "elsewhere")}
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(w.dir, binPath)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(w.dir, binPath), bin, 0o755); err != nil {
				t.Fatal(err)
			}
			spec := func(name, extra string) string {
				return w.write(name, strings.Replace(strings.Replace(execSpec, "%s", uses, 1), "%s", extra, 1))
			}
			unpinned := spec("unpinned.yaml", "")
			good := spec("good.yaml", goodPin)
			bad := spec("bad.yaml", badPin)

			// Unpinned: not started, a warning at the uses value, exit 0.
			r, started := runWithMarker(w, env, "validate", unpinned)
			if started {
				t.Errorf("validate started the unpinned plugin")
			}
			want := unpinned + ":5:11: warning: stages.t.uses: with: not checked: "
			if r.code != 0 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "--exec-plugins") {
				t.Errorf("unpinned: exit %d, want 0 and a line starting %q naming --exec-plugins\n%s%s", r.code, want, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "error:") {
				t.Errorf("unpinned: an unchecked plugin's outputs gave errors:\n%s", r.stdout)
			}

			// graph draws the same spec without starting it.
			r, started = runWithMarker(w, env, "graph", unpinned)
			if started || r.code != 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stdout, "t -.->|if| after") {
				t.Errorf("graph: started=%v exit %d, want not started, exit 0, the warning and the graph\n%s%s", started, r.code, r.stdout, r.stderr)
			}

			// JSON output carries the same warning, and the file is valid.
			r, started = runWithMarker(w, env, "validate", unpinned, "--format", "json")
			var doc struct {
				Valid bool
				Files []struct {
					Problems []struct {
						Line, Col int
						Severity  string
					}
				}
			}
			if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
				t.Fatalf("json: %v\n%s", err, r.stdout)
			}
			if started || !doc.Valid || len(doc.Files) != 1 || len(doc.Files[0].Problems) != 1 ||
				doc.Files[0].Problems[0].Severity != "warning" || doc.Files[0].Problems[0].Line != 5 {
				t.Errorf("json: started=%v, %s", started, r.stdout)
			}

			// The explicit flag starts it, so with is checked.
			r, started = runWithMarker(w, env, "validate", unpinned, "--exec-plugins")
			if !started || r.code != 1 || !strings.Contains(r.stdout, "stages.t.with.mode") || strings.Contains(r.stdout, "warning") {
				t.Errorf("--exec-plugins: started=%v exit %d, want started, exit 1 and an error on with.mode\n%s%s", started, r.code, r.stdout, r.stderr)
			}

			// A correct pin starts it too.
			r, started = runWithMarker(w, env, "validate", good)
			if !started || r.code != 1 || !strings.Contains(r.stdout, "stages.t.with.mode") {
				t.Errorf("correct pin: started=%v exit %d, want started, exit 1 and an error on with.mode\n%s%s", started, r.code, r.stdout, r.stderr)
			}

			// ... unless binaries are never to be started.
			r, started = runWithMarker(w, env, "validate", good, "--exec-plugins=never")
			if started || r.code != 0 || !strings.Contains(r.stdout, good+":5:11: warning: ") {
				t.Errorf("--exec-plugins=never: started=%v exit %d, want not started, exit 0 and a warning\n%s%s", started, r.code, r.stdout, r.stderr)
			}

			// A wrong pin is an error, and the binary is not started.
			r, started = runWithMarker(w, env, "validate", bad)
			if started || r.code != 1 || !strings.Contains(r.stdout, bad+":5:11: error: ") || !strings.Contains(r.stdout, "checksum mismatch") {
				t.Errorf("wrong pin: started=%v exit %d, want not started, exit 1 and a checksum error at uses\n%s%s", started, r.code, r.stdout, r.stderr)
			}
			if pids := w.waitNoProcesses(5 * time.Second); len(pids) > 0 {
				t.Errorf("processes running after validate: %v", pids)
			}
		})
	}
}
