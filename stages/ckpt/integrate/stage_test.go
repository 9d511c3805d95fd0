package integrate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/cli"
	"github.com/mspipe/mspipe/stages/ckpt/integrate"
)

// refusal is what running the stage reports while only its declaration
// ships (README, Status).
const refusal = "stage ckpt/integrate: declared but not implemented in this build (it ships as a declaration so specs validate; see the README's status table)"

func mspipe(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDeclaration(t *testing.T) {
	var d struct {
		Name    string          `json:"name"`
		With    json.RawMessage `json:"with"`
		Outputs []struct{ Name, Type string }
	}
	if err := json.Unmarshal(integrate.Descriptor, &d); err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, o := range d.Outputs {
		outs = append(outs, o.Name+":"+o.Type)
	}
	if d.Name != "ckpt/integrate" || strings.Join(outs, " ") != "checkpoint:path tensors:int bytes:int" {
		t.Errorf("declaration %s with outputs %v", d.Name, outs)
	}
}

// TestRefusedWhereItWouldRun: a spec using the stage validates (its inputs
// checked against the declared schema), and plan, run and plugins each say
// it is not implemented; the run fails with the refusal in run.json.
func TestRefusedWhereItWouldRun(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "integrate.yaml")
	if err := os.WriteFile(spec, []byte(`version: 1
name: declared
stages:
  integrate:
    uses: ckpt/integrate
    with: {from: /tmp/train/checkpoints, format: safetensors}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`version: 1
name: declared
stages:
  integrate:
    uses: ckpt/integrate
    with: {format: npz, devices: 2}
`), 0o644); err != nil {
		t.Fatal(err)
	}

	if code, _, stderr := mspipe(t, "validate", spec); code != 0 {
		t.Errorf("validate: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr := mspipe(t, "validate", bad)
	wantBad := []string{
		bad + ":6:11: error: stages.integrate.with: missing property 'from'",
		bad + ":6:20: error: stages.integrate.with.format: value must be one of 'ckpt', 'safetensors'",
		bad + `:6:25: error: stages.integrate.with: unknown input "devices" for ckpt/integrate`,
		"1 file checked: 1 invalid, 3 errors",
	}
	if got := strings.Split(strings.TrimSpace(stdout+stderr), "\n"); code != 1 || !hasLines(got, wantBad) {
		t.Errorf("validate bad.yaml: exit %d\n%s%s\nwant exit 1 and\n%s", code, stdout, stderr, strings.Join(wantBad, "\n"))
	}

	code, stdout, stderr = mspipe(t, "plan", "--runs-dir", filepath.Join(dir, "runs"), spec)
	if want := "1. integrate (ckpt/integrate): unknown — " + refusal; code != 0 || !strings.Contains(stdout, want+"\n") {
		t.Errorf("plan: exit %d\n%s%s\nwant the line %q", code, stdout, stderr, want)
	}

	runs := filepath.Join(dir, "runs")
	code, stdout, stderr = mspipe(t, "run", "--runs-dir", runs, spec)
	if code != 1 || !strings.Contains(stderr, "[integrate] failed after ") || !strings.Contains(stderr, "s: "+refusal+"\n") {
		t.Errorf("run: exit %d\n%s%s\nwant exit 1 and %q", code, stdout, stderr, refusal)
	}
	b, err := os.ReadFile(filepath.Join(runs, strings.TrimSpace(stdout), "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Status string
		Error  string
		Stages map[string]struct{ Status, Reason string }
	}
	if err := json.Unmarshal(b, &state); err != nil {
		t.Fatal(err)
	}
	st := state.Stages["integrate"]
	if state.Status != "failed" || state.Error != "stage integrate failed: "+refusal || st.Status != "failed" || st.Reason != refusal {
		t.Errorf("run.json: %s", b)
	}

	code, stdout, _ = mspipe(t, "plugins")
	if want := "ckpt/integrate - built-in, not implemented yet Integrate (merge)"; code != 0 || !strings.Contains(strings.Join(strings.Fields(stdout), " "), want) {
		t.Errorf("plugins: exit %d\n%s\nwant a row %q", code, stdout, want)
	}
}

func hasLines(got, want []string) bool {
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			return false
		}
	}
	return true
}
