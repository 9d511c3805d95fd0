package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// rankPid finds the live rank process with RANK_ID=rank among the
// workspace's processes.
func (w *workspace) rankPid(rank int) int {
	for _, pid := range w.taggedProcesses() {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte("__npu-worker")) && bytes.Contains(env, []byte("\x00RANK_ID="+strconv.Itoa(rank)+"\x00")) {
			return pid
		}
	}
	return 0
}

// TestKillingOneRankFailsEveryRank kills rank 2 of a 4-device data-parallel
// job mid-training: the other ranks fail in their collectives naming rank
// 2, the stage fails with a reason naming it, and no process is left.
func TestKillingOneRankFailsEveryRank(t *testing.T) {
	w := newWorkspace(t)
	w.write("dp.yaml", `version: 1
name: dp
cluster: {devices: 4}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 2560, test_images: 40, shards: 4}}
  train:
    uses: npu/train
    needs: prepare
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, epochs: 50, batch_size: 8, log_steps: 1, collective_timeout: 5s}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := w.command(ctx, "run", "dp.yaml")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until rank 2 has trained a few steps.
	var pid int
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rank 2 never trained\n%s", stderr.String())
		}
		logs, _ := filepath.Glob(filepath.Join(w.dir, "runs", "*", "stages", "train", "device2", "train.log2"))
		if len(logs) == 1 {
			if data, _ := os.ReadFile(logs[0]); bytes.Count(data, []byte("loss is")) >= 3 {
				pid = w.rankPid(2)
				break
			}
		}
	}
	if pid == 0 {
		t.Fatal("rank 2's process not found")
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr.String())
	}
	if d := time.Since(killed); d > 60*time.Second {
		t.Errorf("mspipe took %s after the kill, with a 5s collective timeout", d)
	}
	if pids := w.waitNoProcesses(5 * time.Second); len(pids) > 0 {
		t.Errorf("processes left behind: %v", pids)
	}
	id := strings.TrimSpace(stdout.String())
	train := w.state(id).Stages["train"]
	t.Logf("train stage: %s", train.Reason)
	if train.Status != "failed" || !strings.Contains(train.Reason, "rank 2 (device 2)") {
		t.Errorf("train = %s: %s; want failed naming rank 2", train.Status, train.Reason)
	}
	// The ranks shared memory (every one is on this host), and nothing of
	// it is left in /dev/shm.
	stageDir := filepath.Join(w.dir, "runs", id, "stages", "train")
	if left := shmFilesOf(t, stageDir); len(left) > 0 {
		t.Errorf("shared memory files left: %v", left)
	}
	// Every surviving rank failed in a collective that names rank 2.
	for _, r := range []int{0, 1, 3} {
		log, _ := os.ReadFile(filepath.Join(stageDir, fmt.Sprintf("device%d", r), fmt.Sprintf("train.log%d", r)))
		if want := fmt.Sprintf("collective: rank %d of 4, transport shm", r); !bytes.Contains(log, []byte(want)) {
			t.Errorf("rank %d's log does not say %q", r, want)
		}
		if !bytes.Contains(log, []byte("rank 2")) {
			tail := string(log)
			if len(tail) > 400 {
				tail = tail[len(tail)-400:]
			}
			t.Errorf("rank %d's log does not name rank 2:\n%s", r, tail)
		}
	}
}

// shmFilesOf lists the files in /dev/shm of the data-parallel job whose
// stage directory is dir (named by the tag of its secret and addresses).
func shmFilesOf(t *testing.T, dir string) []string {
	t.Helper()
	var wc struct {
		BasePort   int    `json:"base_port"`
		SecretFile string `json:"secret_file"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "worker.json"))
	if err == nil {
		err = json.Unmarshal(raw, &wc)
	}
	if err != nil {
		t.Fatalf("worker.json: %v", err)
	}
	tables, _ := filepath.Glob(filepath.Join(dir, "rank_table_*pcs.json"))
	if len(tables) != 1 {
		t.Fatalf("rank tables in %s: %v", dir, tables)
	}
	table, _, err := ranktable.Load(tables[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := collective.FromRankTable(table, 0, wc.BasePort)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Secret, err = os.ReadFile(wc.SecretFile); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(collective.DefaultShmDir, "mspipe-"+collective.ShmTag(cfg)+"-*"))
	return left
}

// A simulated device too small for the model fails the stage like a real
// one: the reason names what did not fit.
func TestDeviceMemoryTooSmallFailsNamingTheBuffer(t *testing.T) {
	w := newWorkspace(t)
	w.write("oom.yaml", `version: 1
name: oom
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 80, test_images: 20}}
  train:
    uses: npu/train
    needs: prepare
    with: {data: "${{ stages.prepare.outputs.dir }}", mode: stand_alone, epochs: 1, batch_size: 8, device_memory: 3MiB}
`)
	r := w.run("run", "oom.yaml")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	train := w.state(id).Stages["train"]
	want := "out of device memory: optimizer moments needs 1.0 MiB, 2.2 MiB of 3.0 MiB in use " +
		"(largest: resnet20 parameters 1.0 MiB, resnet20 gradients 1.0 MiB, input batch float32[8 3 32 32] 96.0 KiB)"
	if train.Status != "failed" || !strings.Contains(train.Reason, want) {
		t.Errorf("train = %s: %s; want failed with ...%s", train.Status, train.Reason, want)
	}
}

// A cluster given as a rank table path relative to the spec trains: the
// ranks, which run in their device{i}/ directories, get it as an absolute
// RANK_TABLE_FILE. The ranks of each of the two servers share memory.
func TestRelativeRankTable(t *testing.T) {
	w := newWorkspace(t)
	r := w.run("ranktable", "generate", "--devices", "8", "--hosts", "2", "--scheme", "local")
	if r.code != 0 {
		t.Fatalf("generate: exit %d\n%s", r.code, r.stderr)
	}
	w.write("tables/two-hosts.json", r.stdout)
	w.write("mh.yaml", `version: 1
name: two-hosts
cluster: {rank_table: tables/two-hosts.json}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 640, test_images: 40, shards: 16}}
  train:
    uses: npu/train
    needs: prepare
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, epochs: 1, batch_size: 8}
`)
	r = w.run("run", "mh.yaml")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	for _, rank := range []int{0, 15} {
		log, _ := os.ReadFile(filepath.Join(w.dir, "runs", id, "stages", "train", fmt.Sprintf("device%d", rank), fmt.Sprintf("train.log%d", rank)))
		if want := fmt.Sprintf("collective: rank %d of 16, transport shm within each of 2 servers, tcp between them", rank); !bytes.Contains(log, []byte(want)) {
			t.Errorf("rank %d's log does not say %q", rank, want)
		}
	}
}
