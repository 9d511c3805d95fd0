package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var (
	memhogOnce sync.Once
	memhogBin  string
	memhogErr  error
)

// memhog builds tests/testdata/memhog once: a plugin that allocates as
// much as its `mib` input says.
func memhog(t *testing.T) string {
	t.Helper()
	memhogOnce.Do(func() {
		memhogBin = filepath.Join(filepath.Dir(mspipeBin), "memhog")
		out, err := exec.Command("go", "build", "-o", memhogBin, "./testdata/memhog").CombinedOutput()
		if err != nil {
			memhogErr = err
			memhogBin = string(out)
		}
	})
	if memhogErr != nil {
		t.Fatalf("build memhog: %v\n%s", memhogErr, memhogBin)
	}
	return memhogBin
}

// editRunSpec replaces old with new in the copy of the spec a run keeps,
// which is what `mspipe resume` reads.
func (w *workspace) editRunSpec(id, old, new string) {
	w.t.Helper()
	path := filepath.Join(w.dir, "runs", strings.TrimSpace(id), "pipeline.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		w.t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		w.t.Fatalf("%s does not hold %q:\n%s", path, old, data)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// A plugin that allocates past limits.memory fails its stage with a
// message naming the plugin, the limit and the key; run.json records it;
// a plugin under the limit runs with it (RLIMIT_DATA, GOMEMLIMIT); and
// resume with a raised limit completes the run.
func TestPluginOverMemoryLimit(t *testing.T) {
	w := newWorkspace(t)
	bin, err := os.ReadFile(memhog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "memhog"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	w.write("hog.yaml", `version: 1
name: hog
stages:
  small:
    uses: ./memhog
    limits: {memory: 256MiB}
    with: {mib: 16}
  big:
    uses: ./memhog
    needs: small
    limits: {memory: 256MiB}
    with: {mib: 400}
`)
	r := w.run("run", "hog.yaml")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	st := w.state(r.stdout)
	small := st.Stages["small"]
	if small.Status != "succeeded" {
		t.Fatalf("small = %s: %s", small.Status, small.Reason)
	}
	if got := small.Outputs["rlimit_data"]; got != float64(256<<20) {
		t.Errorf("the plugin's RLIMIT_DATA = %v, want %d", got, 256<<20)
	}
	if got := small.Outputs["gomemlimit"]; got != "241591905" { // 9/10 of 256 MiB
		t.Errorf("the plugin's GOMEMLIMIT = %v, want 241591905", got)
	}
	big := st.Stages["big"]
	want := "plugin memhog ran out of memory: limit 256.0 MiB per process (limits.memory)"
	if big.Status != "failed" || !strings.HasPrefix(big.Reason, want) {
		t.Errorf("big = %s: %s\nwant failed with %q", big.Status, big.Reason, want)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
	}
	if pids := w.waitNoProcesses(5e9); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}

	w.editRunSpec(r.stdout, "limits: {memory: 256MiB}\n    with: {mib: 400}", "limits: {memory: 1GiB}\n    with: {mib: 400}")
	res := w.run("resume", strings.TrimSpace(r.stdout))
	if res.code != 0 {
		t.Fatalf("resume with limits.memory 1GiB: exit %d\n%s", res.code, res.stderr)
	}
	st = w.state(r.stdout)
	if big := st.Stages["big"]; big.Status != "succeeded" || big.Outputs["held_mib"] != float64(400) || big.Outputs["rlimit_data"] != float64(1<<30) {
		t.Errorf("after resume big = %s %v: %s", big.Status, big.Outputs, big.Reason)
	}
}

// A training rank that allocates past limits.memory (wide_net's 3072x4096
// layer, its gradients and moments do not fit 384 MiB) fails the stage
// naming the rank and the limit, while the plugin itself stays under it;
// every rank inherits the limit; resume with a higher limit trains.
func TestRankOverMemoryLimit(t *testing.T) {
	w := newWorkspace(t)
	w.write("wide.yaml", `version: 1
name: wide
cluster: {devices: 2}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 160, test_images: 20, shards: 2}}
  train:
    uses: npu/train
    needs: prepare
    limits: {memory: 384MiB}
    with: {data: "${{ stages.prepare.outputs.dir }}", model: wide_net, mode: data_parallel, epochs: 1, batch_size: 8, collective_timeout: 10s}
`)
	r := w.runFor(300, "run", "wide.yaml")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	train := w.state(id).Stages["train"]
	t.Logf("train: %s", train.Reason)
	want := regexp.MustCompile(`^rank [01] ran out of memory: limit 384\.0 MiB per process \(limits\.memory\): .*rank [01] \(device [01]\)`)
	if train.Status != "failed" || !want.MatchString(train.Reason) {
		t.Errorf("train = %s: %s\nwant failed matching %s", train.Status, train.Reason, want)
	}
	if w.state(id).Stages["prepare"].Status != "succeeded" {
		t.Errorf("prepare, without a limit, did not succeed")
	}
	if pids := w.waitNoProcesses(5e9); len(pids) > 0 {
		t.Errorf("processes left: %v", pids)
	}

	w.editRunSpec(id, "limits: {memory: 384MiB}", "limits: {memory: 3GiB}")
	res := w.runFor(300, "resume", id)
	if res.code != 0 {
		t.Fatalf("resume with limits.memory 3GiB: exit %d\n%s", res.code, res.stderr)
	}
	if train := w.state(id).Stages["train"]; train.Status != "succeeded" {
		t.Errorf("after resume train = %s: %s", train.Status, train.Reason)
	}
}
