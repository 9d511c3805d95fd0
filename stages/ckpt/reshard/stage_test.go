package reshard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/cli"
	"github.com/mspipe/mspipe/stages/ckpt/reshard"
)

// refusal is what running the stage reports while only its declaration
// ships (README, Status).
const refusal = "stage ckpt/reshard: declared but not implemented in this build (it ships as a declaration so specs validate; see the README's status table)"

func mspipe(t *testing.T, args ...string) (code int, output string) {
	t.Helper()
	var out bytes.Buffer
	code = cli.Main(context.Background(), args, &out, &out)
	return code, out.String()
}

func writeSpec(t *testing.T, name, with string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	spec := "version: 1\nname: declared\nstages:\n  reshard:\n    uses: ckpt/reshard\n    with: " + with + "\n"
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDeclaration(t *testing.T) {
	var d struct {
		Name    string `json:"name"`
		Outputs []struct{ Name, Type string }
	}
	if err := json.Unmarshal(reshard.Descriptor, &d); err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, o := range d.Outputs {
		outs = append(outs, o.Name+":"+o.Type)
	}
	if d.Name != "ckpt/reshard" || strings.Join(outs, " ") != "checkpoints:path devices:int" {
		t.Errorf("declaration %s with outputs %v", d.Name, outs)
	}
}

// TestInputsCheckedAgainstTheDeclaration: validate accepts a spec using the
// stage and reports every input the declared schema rejects.
func TestInputsCheckedAgainstTheDeclaration(t *testing.T) {
	good := writeSpec(t, "good.yaml", `{from: /ckpt, devices: 4, strategy: {fc.matmul: [[1, 1], [1, 2]]}, format: ckpt}`)
	if code, out := mspipe(t, "validate", good); code != 0 {
		t.Errorf("validate: exit %d\n%s", code, out)
	}
	bad := writeSpec(t, "bad.yaml", `{devices: 0, strategy: {fc.matmul: [[0, 1]]}}`)
	code, out := mspipe(t, "validate", bad)
	want := strings.Join([]string{
		bad + ":6:11: error: stages.reshard.with: missing property 'from'",
		bad + ":6:21: error: stages.reshard.with.devices: minimum: got 0, want 1",
		bad + ":6:48: error: stages.reshard.with.strategy.fc.matmul[0][0]: minimum: got 0, want 1",
		"1 file checked: 1 invalid, 3 errors",
	}, "\n")
	if code != 1 || strings.TrimSpace(out) != want {
		t.Errorf("validate bad.yaml: exit %d\n%s\nwant exit 1 and\n%s", code, out, want)
	}
}

// TestRefusedWhenRun: plan and run report the refusal; the run fails with
// it in run.json; plugins lists the stage as not implemented.
func TestRefusedWhenRun(t *testing.T) {
	spec := writeSpec(t, "reshard.yaml", `{from: /ckpt, devices: 2}`)
	runs := filepath.Join(t.TempDir(), "runs")
	code, out := mspipe(t, "plan", "--runs-dir", runs, spec)
	if want := "1. reshard (ckpt/reshard): unknown — " + refusal + "\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("plan: exit %d\n%s\nwant the line %q", code, out, want)
	}

	code, out = mspipe(t, "run", "--runs-dir", runs, spec)
	if code != 1 || !strings.Contains(out, "s: "+refusal+"\n") {
		t.Errorf("run: exit %d\n%s\nwant exit 1 and %q", code, out, refusal)
	}
	entries, err := os.ReadDir(runs)
	if err != nil || len(entries) != 1 {
		t.Fatalf("runs: %v %v", entries, err)
	}
	b, err := os.ReadFile(filepath.Join(runs, entries[0].Name(), "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var state struct {
		Status, Error string
		Stages        map[string]struct{ Status, Reason string }
	}
	if err := json.Unmarshal(b, &state); err != nil {
		t.Fatal(err)
	}
	if st := state.Stages["reshard"]; state.Status != "failed" || state.Error != "stage reshard failed: "+refusal || st.Status != "failed" || st.Reason != refusal {
		t.Errorf("run.json: %s", b)
	}

	code, out = mspipe(t, "plugins")
	if want := "ckpt/reshard - built-in, not implemented yet Reshard a checkpoint"; code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
		t.Errorf("plugins: exit %d\n%s\nwant a row %q", code, out, want)
	}
}
