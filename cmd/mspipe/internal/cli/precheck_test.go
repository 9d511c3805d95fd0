package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// precheckSpec runs a stage before the one whose input comes from -p, and
// takes its cluster size from a param.
const precheckSpec = `version: 1
name: precheck
params:
  epochs: {type: int, default: 1}
  n: {type: int, default: 1}
cluster: {devices: "${{ params.n }}"}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 10, test_images: 10}}
  train:
    uses: npu/train
    needs: [prepare]
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, epochs: "${{ params.epochs }}"}
`

// TestParamsCheckedBeforeAnythingRuns: a -p value a stage's schema or the
// cluster rules refuse stops run and plan with exit 1 at the value's place
// in the spec, before the first stage starts.
func TestParamsCheckedBeforeAnythingRuns(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(spec, []byte(precheckSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "runs")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", spec, "-p", "epochs=0"}, spec + ":12:75: error: stages.train.with.epochs: the value of ${{ params.epochs }} (0) does not fit: minimum: got 0, want 1"},
		{[]string{"plan", spec, "-p", "epochs=0"}, spec + ":12:75: error: stages.train.with.epochs: the value of ${{ params.epochs }} (0) does not fit: minimum: got 0, want 1"},
		{[]string{"run", spec, "-p", "n=3"}, spec + ":6:20: error: cluster.devices: ${{ params.n }} is 3:"},
	} {
		code, stdout, stderr := runCLI(t, append(tc.args, "--runs-dir", runs)...)
		if code != 1 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "nothing was run") {
			t.Errorf("%v: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1 and %q", tc.args, code, stdout, stderr, tc.want)
		}
		if entries, _ := os.ReadDir(runs); len(entries) != 0 {
			t.Fatalf("%v: a run was started: %v", tc.args, entries)
		}
	}
}
