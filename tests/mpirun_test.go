package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// sameAsLocalLauncher checks that the run of launcherSpec through launcher
// wrote the same checkpoints as the local launcher's run, bit for bit (2
// per rank of 8), and that every rank's 40 steps reached the run's events;
// it returns the launcher's run directory.
func sameAsLocalLauncher(t *testing.T, w *workspace, local, other result, launcher string) string {
	t.Helper()
	runs := func(r result) string { return filepath.Join(w.dir, "runs", strings.TrimSpace(lastLine(r.stdout))) }
	localDir, otherDir := runs(local), runs(other)
	want := checkpoints(t, filepath.Join(localDir, "stages", "train"))
	got := checkpoints(t, filepath.Join(otherDir, "stages", "train"))
	if len(got) != len(want) || len(want) != 16 {
		t.Errorf("%s wrote %d checkpoints, the local launcher %d; want 16 (2 per rank)", launcher, len(got), len(want))
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s differs between the local launcher and %s", name, launcher)
		}
	}
	steps := stepRanks(t, otherDir)
	for r := 0; r < 8; r++ {
		if steps[r] != 40 {
			t.Errorf("rank %d: %d step events through %s, want 40", r, steps[r], launcher)
		}
	}
	return otherDir
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
	mpiDir := sameAsLocalLauncher(t, w, local, mpi, "mpirun")
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
	if pids := w.waitNoProcesses(10 * time.Second); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// mpiRankPid finds the live worker process that mpirun started as rank.
func (w *workspace) mpiRankPid(rank int) int {
	for _, pid := range w.taggedProcesses() {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte("__npu-worker")) && bytes.Contains(env, []byte(fmt.Sprintf("\x00OMPI_COMM_WORLD_RANK=%d\x00", rank))) {
			return pid
		}
	}
	return 0
}

// TestMPIRunKilledRankIsNamed kills rank 2 of an 8-device job that mpirun
// started: the stage fails naming rank 2 (not a peer that noticed first),
// and mpirun, every rank and mspipe are gone.
func TestMPIRunKilledRankIsNamed(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun (Open MPI) is not installed")
	}
	w := newWorkspace(t)
	w.write("kill.yaml", `version: 1
name: kill
cluster: {devices: 8}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 2560, test_images: 40, shards: 8}}
  train:
    uses: npu/train
    needs: prepare
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, epochs: 50, batch_size: 4, log_steps: 1, launcher: mpirun, collective_timeout: 5s}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := w.command(ctx, "run", "kill.yaml")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(2 * time.Minute); pid == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rank 2 never trained\n%s", stderr.String())
		}
		logs, _ := filepath.Glob(filepath.Join(w.dir, "runs", "*", "stages", "train", "device2", "train.log2"))
		if len(logs) == 1 {
			if data, _ := os.ReadFile(logs[0]); bytes.Count(data, []byte("loss is")) >= 3 {
				pid = w.mpiRankPid(2)
			}
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatal("mspipe run succeeded although rank 2 was killed")
	}
	id := strings.TrimSpace(lastLine(stdout.String()))
	train := w.state(id).Stages["train"]
	if train.Status != "failed" || !strings.Contains(train.Reason, "rank 2 (host ") || !strings.Contains(train.Reason, "ended without reporting why (killed by a signal?)") {
		t.Errorf("train: %s, reason %q; want failed naming rank 2", train.Status, train.Reason)
	}
	if pids := w.waitNoProcesses(10 * time.Second); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
}

// TestMPIRunTwoHosts runs a 2-host x 8-device job with one `mspipe run`
// in the first simulated host (network namespaces): mpirun starts the
// second host's ranks through an rsh agent that enters its namespace, as
// ssh would log in. Every rank's checkpoints equal bit for bit those of
// the same 16-device job on one host, with the local launcher and a
// loopback table of two servers.
func TestMPIRunTwoHosts(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun (Open MPI) is not installed")
	}
	w := newWorkspace(t)
	s := newSimulatedHosts(t, w)
	spec := w.write("mh.yaml", multiHostSpec(s.table, "epochs: 1, launcher: mpirun"))
	agent := filepath.Join(w.dir, "rsh-agent")
	script := "#!/bin/sh\nhost=$1\nshift\ncase $host in\n"
	for _, h := range s.c.Hosts {
		script += fmt.Sprintf("%s) ns=%s ;;\n", h.ServerIP, h.Netns)
	}
	script += "*) echo \"rsh-agent: no simulated host $host\" >&2; exit 255 ;;\nesac\nexec ip netns exec \"$ns\" sh -c \"$*\"\n"
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := s.c.Command(ctx, 0, mspipeBin, "run", spec)
	cmd.Dir = w.dir
	// No MSPIPE_JOB_SECRET_FILE: under mpirun the run directory is shared
	// (here: one filesystem), and so is the job secret in it.
	cmd.Env = append(os.Environ(), "MSPIPE_E2E_TAG="+w.tag, "MSPIPE_PLUGIN_PATH=", "XDG_CONFIG_HOME="+filepath.Join(w.dir, ".config"),
		"OMPI_MCA_plm_rsh_agent="+agent)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mspipe run in host 0 through mpirun: %v\n%s", err, stderr.String())
	}
	if pids := w.waitNoProcesses(10 * time.Second); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}
	if pids, err := s.c.Processes(); err != nil || len(pids) > 0 {
		t.Errorf("processes left in the hosts' namespaces: %v %v", pids, err)
	}
	mpiDir := filepath.Join(w.dir, "runs", strings.TrimSpace(lastLine(stdout.String())), "stages", "train")
	for rank := 0; rank < 16; rank++ {
		log, err := os.ReadFile(filepath.Join(mpiDir, fmt.Sprintf("device%d", rank), fmt.Sprintf("train.log%d", rank)))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("collective: rank %d of 16, transport shm within each of 2 servers, tcp between them", rank); !bytes.Contains(log, []byte(want)) {
			t.Errorf("rank %d's log does not say %q", rank, want)
		}
	}
	if steps := stepRanks(t, filepath.Dir(filepath.Dir(mpiDir))); len(steps) != 16 || steps[15] == 0 || steps[15] != steps[0] {
		t.Errorf("step events per rank through mpirun: %v, want the same number from each of 16 ranks", steps)
	}

	want := checkpoints(t, trainDir(w, runOnOneHost(t, w)))
	got := checkpoints(t, mpiDir)
	if len(want) != 16 || len(got) != len(want) {
		t.Errorf("%d checkpoints through mpirun, %d on one host; want 16 (one per rank)", len(got), len(want))
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s differs between mpirun on two hosts and one host", name)
		}
	}
}
