package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/internal/netns"
)

// The multi-host tests simulate two servers of eight devices each as
// network namespaces (internal/netns) and run the same `mspipe run` in
// each, as the seeds' run_cluster.sh runs on every server. They need root.

// multiHostSpec is a small data-parallel job on the cluster of rankTable.
func multiHostSpec(rankTable, with string) string {
	return fmt.Sprintf(`version: 1
name: two-hosts
cluster: {rank_table: %s}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 640, test_images: 40, shards: 16}}
  train:
    uses: npu/train
    needs: prepare
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, batch_size: 8, log_steps: 1, %s}
`, rankTable, with)
}

// simulatedHosts is a cluster of namespaces with the job's rank table, a
// shared job secret and one directory per host to run mspipe in.
type simulatedHosts struct {
	w       *workspace
	c       *netns.Cluster
	table   string
	secret  string
	hostDir []string
}

func newSimulatedHosts(t *testing.T, w *workspace) *simulatedHosts {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skipf("multi-host tests need network namespaces: %v", err)
	}
	s := &simulatedHosts{w: w, c: netns.New(t, 2, 8)}
	s.table = filepath.Join(w.dir, "rank_table_16pcs.json")
	if err := s.c.WriteRankTable(s.table); err != nil {
		t.Fatal(err)
	}
	// A secret of its own: the shared-memory files of a job are named
	// by its secret and addresses, and /dev/shm is not per namespace, so
	// two suites' simulated clusters (the same addresses) running at
	// once would otherwise open each other's files.
	s.secret = filepath.Join(w.dir, "job.secret")
	if err := os.WriteFile(s.secret, []byte(rand.Text()), 0o600); err != nil {
		t.Fatal(err)
	}
	for h := range s.c.Hosts {
		dir := filepath.Join(w.dir, fmt.Sprintf("host%d", h))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s.hostDir = append(s.hostDir, dir)
	}
	return s
}

// hostRun is one `mspipe run` inside a simulated host.
type hostRun struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
}

// start runs mspipe with args inside host h, in its own directory (so its
// own runs/), with the job secret file in the environment unless
// noSecret.
func (s *simulatedHosts) start(ctx context.Context, h int, noSecret bool, args ...string) *hostRun {
	s.w.t.Helper()
	r := &hostRun{done: make(chan struct{})}
	r.cmd = s.c.Command(ctx, h, mspipeBin, args...)
	r.cmd.Dir = s.hostDir[h]
	r.cmd.Env = append(os.Environ(), "MSPIPE_E2E_TAG="+s.w.tag, "MSPIPE_PLUGIN_PATH=", "XDG_CONFIG_HOME="+filepath.Join(s.hostDir[h], ".config"), "MSPIPE_RUNS_DIR=")
	if !noSecret {
		r.cmd.Env = append(r.cmd.Env, "MSPIPE_JOB_SECRET_FILE="+s.secret)
	}
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	if err := r.cmd.Start(); err != nil {
		s.w.t.Fatalf("start mspipe in host %d: %v", h, err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	return r
}

func (r *hostRun) code() int {
	<-r.done
	return r.cmd.ProcessState.ExitCode()
}

// stageDir is the train stage's directory of the run in host h.
func (s *simulatedHosts) stageDir(h int, r *hostRun) string {
	return filepath.Join(s.hostDir[h], "runs", strings.TrimSpace(r.stdout.String()), "stages", "train")
}

// runEverywhere runs `mspipe run spec` in every host at once, as the
// servers of a cluster do, and fails the test unless all succeed and no
// process is left.
func (s *simulatedHosts) runEverywhere(spec string) []*hostRun {
	t := s.w.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var runs []*hostRun
	for h := range s.c.Hosts {
		runs = append(runs, s.start(ctx, h, false, "run", spec))
	}
	for h, r := range runs {
		if code := r.code(); code != 0 {
			t.Fatalf("host %d: exit %d\n%s", h, code, r.stderr.String())
		}
	}
	if pids := s.w.waitNoProcesses(10 * time.Second); len(pids) > 0 {
		t.Errorf("processes left behind: %v", pids)
	}
	return runs
}

// runOnOneHost runs the job of multiHostSpec (epochs: 1) on this machine
// alone, on a loopback table of two servers: the reference the multi-host
// runs must equal bit for bit.
func runOnOneHost(t *testing.T, w *workspace) result {
	t.Helper()
	g := w.run("ranktable", "generate", "--devices", "8", "--hosts", "2", "--scheme", "local", "-o", "loopback_16pcs.json")
	if g.code != 0 {
		t.Fatalf("ranktable generate: exit %d\n%s", g.code, g.stderr)
	}
	w.write("one.yaml", multiHostSpec(filepath.Join(w.dir, "loopback_16pcs.json"), "epochs: 1"))
	one := w.run("run", "one.yaml")
	if one.code != 0 {
		t.Fatalf("one host: exit %d\n%s", one.code, one.stderr)
	}
	return one
}

// trainDir is the train stage's directory of a run in the workspace.
func trainDir(w *workspace, r result) string {
	return filepath.Join(w.dir, "runs", strings.TrimSpace(lastLine(r.stdout)), "stages", "train")
}

// trainOutputs reads the train stage's outputs from run.json.
func trainOutputs(t *testing.T, runDir string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runDir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st runState
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st.Stages["train"].Outputs
}

// TestTwoHostsTrainLikeOne runs a 2-host x 8-device data-parallel job as
// two `mspipe run` in two namespaces: both succeed, each starts the eight
// ranks whose device_ip it has, the ranks talk TCP between the servers,
// and the final checkpoints equal bit for bit those of the same 16-device
// job on one host with a loopback table of two servers.
func TestTwoHostsTrainLikeOne(t *testing.T) {
	w := newWorkspace(t)
	s := newSimulatedHosts(t, w)
	spec := w.write("mh.yaml", multiHostSpec(s.table, "epochs: 1"))

	// Without the shared secret the job is refused before any rank starts.
	refused := s.start(context.Background(), 0, true, "run", spec)
	if code := refused.code(); code != 1 {
		t.Fatalf("without MSPIPE_JOB_SECRET_FILE: exit %d, want 1\n%s", code, refused.stderr.String())
	}
	if msg := refused.stderr.String(); !strings.Contains(msg, "MSPIPE_JOB_SECRET_FILE is not set") || !strings.Contains(msg, "head -c 32 /dev/urandom") {
		t.Errorf("refusal does not say how to make a secret:\n%s", msg)
	}
	if devs, _ := filepath.Glob(filepath.Join(s.hostDir[0], "runs", "*", "stages", "train", "device*")); len(devs) != 0 {
		t.Errorf("refused job started ranks: %v", devs)
	}

	// Outside the cluster (this machine's own namespace) no rank is local.
	outside := w.run("run", spec)
	for _, want := range []string{"no rank runs on this host", "the table's servers are 10.213.0.10, 10.213.0.11"} {
		if outside.code != 1 || !strings.Contains(outside.stderr, want) {
			t.Errorf("run outside the cluster: exit %d, want 1 and %q:\n%s", outside.code, want, outside.stderr)
		}
	}

	runs := s.runEverywhere(spec)
	// The shared secret is in no file of either run (env{i}.log names
	// the file, not its content).
	secret, _ := os.ReadFile(s.secret)
	for _, dir := range s.hostDir {
		_ = filepath.WalkDir(filepath.Join(dir, "runs"), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, secret) {
				t.Errorf("%s holds the job secret", path)
			}
			return nil
		})
	}
	for h, r := range runs {
		dir := s.stageDir(h, r)
		first, other := 8*h, 8*(1-h)
		for rank := first; rank < first+8; rank++ {
			log, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("device%d", rank), fmt.Sprintf("train.log%d", rank)))
			if err != nil {
				t.Fatalf("host %d: rank %d: %v", h, rank, err)
			}
			if want := fmt.Sprintf("collective: rank %d of 16, transport shm within each of 2 servers, tcp between them", rank); !bytes.Contains(log, []byte(want)) {
				t.Errorf("host %d: rank %d's log does not say %q", h, rank, want)
			}
		}
		if devs, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("device%d", other))); len(devs) != 0 {
			t.Errorf("host %d ran rank %d of the other server", h, other)
		}
		want := fmt.Sprintf("ranks %d-%d of 16 run here (server %s); the others run on their servers", first, first+7, s.c.Hosts[h].ServerIP)
		if !strings.Contains(r.stderr.String(), want) {
			t.Errorf("host %d's console does not say %q:\n%s", h, want, r.stderr.String())
		}
	}

	// The same job on one host, two loopback servers.
	one := runOnOneHost(t, w)
	oneOut := w.state(one.stdout).Stages["train"].Outputs
	oneDir := trainDir(w, one)
	for h, r := range runs {
		out := trainOutputs(t, filepath.Join(s.hostDir[h], "runs", strings.TrimSpace(r.stdout.String())))
		got, _ := out["checkpoint"].(string)
		lead := 8 * h
		if !strings.Contains(got, fmt.Sprintf("device%d", lead)) {
			t.Errorf("host %d's checkpoint output %q is not rank %d's", h, got, lead)
		}
		want := filepath.Join(oneDir, fmt.Sprintf("device%d", lead), fmt.Sprintf("ckpt_%d", lead), filepath.Base(got))
		a, errA := os.ReadFile(got)
		b, errB := os.ReadFile(want)
		if errA != nil || errB != nil {
			t.Fatalf("read checkpoints: %v, %v", errA, errB)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("host %d: rank %d's final checkpoint differs from the one-host job's (%s vs %s)", h, lead, got, want)
		}
		if h == 0 && out["loss"] != oneOut["loss"] {
			t.Errorf("host 0 loss %v, one host %v", out["loss"], oneOut["loss"])
		}
	}
}

// peerInError matches the peer a collective error names: "rank 9
// (10.213.101.11:29509)".
var peerInError = regexp.MustCompile(`rank (\d+) \((10\.213\.(\d+)\.\d+):\d+\)`)

// TestHostLinkDownFailsBothSides takes host 1's link down while both hosts
// train: neither hangs; each fails within its collective timeout with an
// error naming a rank of the other server and its address, and no rank
// process is left in either namespace.
func TestHostLinkDownFailsBothSides(t *testing.T) {
	w := newWorkspace(t)
	s := newSimulatedHosts(t, w)
	spec := w.write("mh.yaml", multiHostSpec(s.table, "epochs: 50, collective_timeout: 3s"))
	// A hang is a failure of the test: the context ends it.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runs := []*hostRun{s.start(ctx, 0, false, "run", spec), s.start(ctx, 1, false, "run", spec)}
	// Wait until host 1's rank 8 has trained a few steps.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rank 8 never trained\n%s\n%s", runs[0].stderr.String(), runs[1].stderr.String())
		}
		logs, _ := filepath.Glob(filepath.Join(s.hostDir[1], "runs", "*", "stages", "train", "device8", "train.log8"))
		if len(logs) == 1 {
			if data, _ := os.ReadFile(logs[0]); bytes.Count(data, []byte("loss is")) >= 3 {
				break
			}
		}
	}
	if err := s.c.SetLink(1, false); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	for h, r := range runs {
		if code := r.code(); code != 1 {
			t.Fatalf("host %d: exit %d, want 1 (ctx: %v)\n%s", h, code, ctx.Err(), r.stderr.String())
		}
		t.Logf("host %d: mspipe exited %.1fs after the link went down", h, time.Since(down).Seconds())
	}
	if ctx.Err() != nil {
		t.Fatal("a host hung until the test's deadline")
	}
	for h, r := range runs {
		out := trainOutputs(t, filepath.Join(s.hostDir[h], "runs", strings.TrimSpace(r.stdout.String())))
		if out != nil {
			t.Errorf("host %d: the failed stage has outputs %v", h, out)
		}
		data, err := os.ReadFile(filepath.Join(s.hostDir[h], "runs", strings.TrimSpace(r.stdout.String()), "run.json"))
		if err != nil {
			t.Fatal(err)
		}
		var st runState
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatal(err)
		}
		train := st.Stages["train"]
		t.Logf("host %d: train %s: %s", h, train.Status, train.Reason)
		m := peerInError.FindStringSubmatch(train.Reason)
		otherSubnet := fmt.Sprint(100 + 1 - h) // device addresses of the other host
		if train.Status != "failed" || m == nil || m[3] != otherSubnet {
			t.Errorf("host %d: train %s: %s\nwant failed naming a rank of the other server and its address (10.213.%s.x)", h, train.Status, train.Reason, otherSubnet)
		}
	}
	if pids := w.waitNoProcesses(10 * time.Second); len(pids) > 0 {
		t.Errorf("processes left behind: %v", pids)
	}
	if pids, err := s.c.Processes(); err != nil || len(pids) > 0 {
		t.Errorf("processes left in the namespaces: %v (%v)", pids, err)
	}
}

// TestTwoHostsOverHostNic is the job of TestTwoHostsTrainLikeOne on a rank
// table for ordinary hosts (`ranktable generate --host-nic`): each server's
// host_nic_ip is its own address and the device_ip values are the seeds'
// example addresses, which no host has. Every rank of a server listens on
// the host_nic_ip, and the final checkpoints equal those of the one-host job.
func TestTwoHostsOverHostNic(t *testing.T) {
	w := newWorkspace(t)
	s := newSimulatedHosts(t, w)
	servers := s.c.Hosts[0].ServerIP.String() + "," + s.c.Hosts[1].ServerIP.String()
	table := filepath.Join(w.dir, "host_nic_16pcs.json")
	if g := w.run("ranktable", "generate", "--servers", servers, "--host-nic", "-o", table); g.code != 0 {
		t.Fatalf("ranktable generate --host-nic: exit %d\n%s", g.code, g.stderr)
	}
	spec := w.write("nic.yaml", multiHostSpec(table, "epochs: 1"))
	runs := s.runEverywhere(spec)
	oneDir := trainDir(w, runOnOneHost(t, w))
	for h, r := range runs {
		dir := s.stageDir(h, r)
		lead := 8 * h
		log, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("device%d", lead), fmt.Sprintf("train.log%d", lead)))
		if err != nil {
			t.Fatal(err)
		}
		if want := "transport shm within each of 2 servers, tcp between them"; !bytes.Contains(log, []byte(want)) {
			t.Errorf("host %d: rank %d's log does not say %q:\n%s", h, lead, want, log)
		}
		got, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("device%d", lead), fmt.Sprintf("ckpt_%d", lead), "*.ckpt"))
		if err != nil || len(got) == 0 {
			t.Fatalf("host %d: no checkpoint of rank %d (%v)", h, lead, err)
		}
		for _, path := range got {
			a, errA := os.ReadFile(path)
			b, errB := os.ReadFile(filepath.Join(oneDir, fmt.Sprintf("device%d", lead), fmt.Sprintf("ckpt_%d", lead), filepath.Base(path)))
			if errA != nil || errB != nil || !bytes.Equal(a, b) {
				t.Errorf("host %d: %s differs from the one-host job's (%v, %v)", h, filepath.Base(path), errA, errB)
			}
		}
	}
}
