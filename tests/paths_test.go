package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bootstrapSpec makes the files the path spec names: a data set and a
// checkpoint, copied next to that spec by the test.
const bootstrapSpec = `version: 1
name: bootstrap
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 40, test_images: 20}}
  train:
    uses: npu/train
    needs: [prepare]
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, epochs: 2, batch_size: 8, eval: false, seed: 3}
`

// pathSpec names a path of every kind relatively: a path param's default,
// an exec stage's path output, npu/train's data and init, npu/eval's
// checkpoint and data. It is run from a directory other than its own.
const pathSpec = `version: 1
name: paths
params:
  ck: {type: path, default: ck/init.ckpt}
stages:
  copy:
    uses: exec
    outputs: {out: {type: path}}
    with:
      command: |
        cp "${{ params.ck }}" result.ckpt
        echo out=result.ckpt >> "$MSPIPE_OUTPUT"
  train:
    uses: npu/train
    with: {data: data/cifar-10-batches-bin, init: ck/init.ckpt, model: cnn, epochs: 1, batch_size: 8, eval: false}
  eval_spec:
    uses: npu/eval
    with: {checkpoint: ck/init.ckpt, data: data/cifar-10-batches-bin, model: cnn}
  eval_output:
    uses: npu/eval
    needs: [copy]
    with: {checkpoint: "${{ stages.copy.outputs.out }}", data: data/cifar-10-batches-bin, model: cnn}
`

// TestRelativePathsFollowOneRule runs a spec from another working
// directory: paths it names resolve against its directory, the path an
// exec stage reports against the stage's work directory (a decoy of the
// same name in mspipe's directory is not taken), and a changed file under
// a relative path makes the stages that read it run again.
func TestRelativePathsFollowOneRule(t *testing.T) {
	w := newWorkspace(t)
	w.write("boot.yaml", bootstrapSpec)
	boot := w.run("run", "boot.yaml")
	if boot.code != 0 {
		t.Fatalf("bootstrap: exit %d\n%s", boot.code, boot.stderr)
	}
	bst := w.state(boot.stdout)
	dataDir, _ := bst.Stages["prepare"].Outputs["dir"].(string)
	ckDir, _ := bst.Stages["train"].Outputs["checkpoints"].(string)
	ckFiles, _ := filepath.Glob(filepath.Join(ckDir, "device0", "ckpt_0", "CKP-*.ckpt"))
	if dataDir == "" || len(ckFiles) != 2 {
		t.Fatalf("bootstrap outputs: %+v, checkpoints %v (want two)", bst.Stages["prepare"].Outputs, ckFiles)
	}
	specDir := filepath.Join(w.dir, "project")
	copyTree(t, dataDir, filepath.Join(specDir, "data", "cifar-10-batches-bin"))
	ck, err := os.ReadFile(ckFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	ck2, err := os.ReadFile(ckFiles[1])
	if err != nil {
		t.Fatal(err)
	}
	w.write("project/ck/init.ckpt", string(ck))
	w.write("project/pipeline.yaml", pathSpec)
	// Decoys where the old rules looked: mspipe's working directory.
	w.write("elsewhere/result.ckpt", "not a checkpoint")
	w.write("elsewhere/ck/init.ckpt", "not a checkpoint")

	runFrom := func(args ...string) result {
		t.Helper()
		ws := &workspace{t: t, dir: filepath.Join(w.dir, "elsewhere"), tag: w.tag}
		return ws.run(append(args, "--runs-dir", filepath.Join(w.dir, "runs"))...)
	}
	first := runFrom("run", "../project/pipeline.yaml")
	if first.code != 0 {
		t.Fatalf("run from another directory: exit %d\n%s", first.code, first.stderr)
	}
	st := w.state(first.stdout)
	for sid, s := range st.Stages {
		if s.Status != "succeeded" {
			t.Errorf("%s: %s (%s)", sid, s.Status, s.Reason)
		}
	}
	out, _ := st.Stages["copy"].Outputs["out"].(string)
	if want := filepath.Join(w.dir, "runs", strings.TrimSpace(first.stdout), "stages", "copy", "result.ckpt"); out != want {
		t.Errorf("copy's output = %q, want %q (the stage's work directory)", out, want)
	}
	if got := st.Stages["eval_spec"].Outputs["checkpoint"]; got != filepath.Join(specDir, "ck", "init.ckpt") {
		t.Errorf("eval_spec evaluated %v, want the spec's ck/init.ckpt", got)
	}

	second := runFrom("run", "../project/pipeline.yaml")
	if second.code != 0 {
		t.Fatalf("second run: exit %d\n%s", second.code, second.stderr)
	}
	for sid, s := range w.state(second.stdout).Stages {
		if s.Status != "cached" {
			t.Errorf("unchanged inputs: %s is %s, want cached", sid, s.Status)
		}
	}

	// Another checkpoint under the same relative name: every stage that
	// reads it, directly or through the param, runs again.
	w.write("project/ck/init.ckpt", string(ck2))
	third := runFrom("run", "../project/pipeline.yaml")
	if third.code != 0 {
		t.Fatalf("run after the change: exit %d\n%s", third.code, third.stderr)
	}
	for sid, s := range w.state(third.stdout).Stages {
		if s.Status != "succeeded" {
			t.Errorf("after ck/init.ckpt changed: %s is %s, want succeeded (run again)", sid, s.Status)
		}
	}
}
