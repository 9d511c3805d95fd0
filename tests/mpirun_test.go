package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// launcherSpec is a small data-parallel job on 8 devices whose launcher is
// a parameter; the model has no BatchNorm, so every rank saves the same
// checkpoints, and the run is deterministic.
const launcherSpec = `version: 1
name: launchers
params:
  launcher: {type: string, default: local}
  launcher_args: {type: list, default: []}
cluster: {devices: 8}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 640, test_images: 40, shards: 8}}
  train:
    uses: npu/train
    needs: prepare
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      model: cnn
      mode: data_parallel
      epochs: 2
      batch_size: 4
      log_steps: 5
      launcher: "${{ params.launcher }}"
      launcher_args: "${{ params.launcher_args }}"
`

// checkpoints returns every rank's checkpoint files of a run's train
// stage, by path relative to the stage directory.
func checkpoints(t *testing.T, stageDir string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(stageDir, "device*", "ckpt_*", "*.ckpt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no checkpoints in %s: %v", stageDir, err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(stageDir, f)
		out[rel] = data
	}
	return out
}

// stepRanks counts the step events of each rank in a run's events.jsonl.
func stepRanks(t *testing.T, runDir string) map[int]int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, line := range bytes.Split(data, []byte("\n")) {
		var ev struct {
			Event string
			Rank  int
		}
		if json.Unmarshal(line, &ev) == nil && ev.Event == "step" {
			out[ev.Rank]++
		}
	}
	return out
}

// TestMPIRunTrainsLikeTheLocalLauncher runs the same 8-device job through
// mspipe's own launcher and through Open MPI's mpirun: the checkpoints are
// bit-identical, every rank's steps reach the run's events, the seeds'
// per-device files are there, and no process is left.
func TestMPIRunTrainsLikeTheLocalLauncher(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun (Open MPI) is not installed")
	}
	w := newWorkspace(t)
	w.write("launchers.yaml", launcherSpec)
	local := w.run("run", "launchers.yaml")
	if local.code != 0 {
		t.Fatalf("local launcher: exit %d\n%s", local.code, local.stderr)
	}
	mpi := w.run("run", "launchers.yaml", "--param", "launcher=mpirun", "--param", `launcher_args=["--bind-to", "none"]`)
	if mpi.code != 0 {
		t.Fatalf("mpirun: exit %d\n%s", mpi.code, mpi.stderr)
	}
	if !strings.Contains(mpi.stdout+mpi.stderr, "--map-by slot") || !strings.Contains(mpi.stdout+mpi.stderr, "--bind-to none") {
		t.Errorf("the output does not show mpirun's command line with the launcher_args:\n%s%s", mpi.stdout, mpi.stderr)
	}
	runs := func(r result) string { return filepath.Join(w.dir, "runs", strings.TrimSpace(lastLine(r.stdout))) }
	localDir, mpiDir := runs(local), runs(mpi)
	want := checkpoints(t, filepath.Join(localDir, "stages", "train"))
	got := checkpoints(t, filepath.Join(mpiDir, "stages", "train"))
	if len(got) != len(want) || len(want) != 16 {
		t.Errorf("mpirun wrote %d checkpoints, the local launcher %d; want 16 (2 per rank)", len(got), len(want))
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s differs between the local launcher and mpirun", name)
		}
	}
	steps := stepRanks(t, mpiDir)
	for r := 0; r < 8; r++ {
		if steps[r] != 40 {
			t.Errorf("rank %d: %d step events through mpirun, want 40", r, steps[r])
		}
	}
	stageDir := filepath.Join(mpiDir, "stages", "train")
	secret, err := os.ReadFile(filepath.Join(stageDir, "job.secret"))
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 8; r++ {
		dev := filepath.Join(stageDir, fmt.Sprintf("device%d", r))
		env, err := os.ReadFile(filepath.Join(dev, fmt.Sprintf("env%d.log", r)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(env, []byte(fmt.Sprintf("\nRANK_ID=%d\n", r))) || !bytes.Contains(env, []byte(fmt.Sprintf("\nOMPI_COMM_WORLD_RANK=%d\n", r))) {
			t.Errorf("env%d.log lacks RANK_ID or OMPI_COMM_WORLD_RANK", r)
		}
		if bytes.Contains(env, secret) {
			t.Errorf("env%d.log holds the job secret", r)
		}
		log, err := os.ReadFile(filepath.Join(dev, fmt.Sprintf("train.log%d", r)))
		if err != nil || !bytes.Contains(log, []byte("epoch: 2 step: 20, loss is ")) {
			t.Errorf("train.log%d lacks the last LossMonitor line: %v", r, err)
		}
	}
	if pids := w.waitNoProcesses(10e9); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
