package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mspipe plan shows how each split npu/train stage lays out its network:
// auto_parallel's search fits wide_net into 128 MiB devices by splitting
// its big MatMul eight ways, where data parallel (every device holding the
// whole 3072×4096 weight, its gradient and moment) would not fit; the
// seeds' strategy uses 2 of 8 devices; no rank or plugin starts.
func TestPlanShowsParallelLayout(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "split.yaml")
	if err := os.WriteFile(spec, []byte(`version: 1
name: split
cluster: {devices: 8}
stages:
  wide:
    uses: npu/train
    with: {data: /nonexistent, model: wide_net, mode: auto_parallel, device_memory: 128MiB}
  seeds:
    uses: npu/train
    with: {data: /nonexistent, model: semi_auto_net, mode: semi_auto_parallel, strategy: {fc.matmul: [[1, 1], [1, 2]]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "plan", spec)
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`parallel plan of wide:\n  machine: local \(this computer.s simulated devices.*\n  wide_net in auto_parallel on 8 devices, global batch 256:`),
		// Split beyond the batch over all 8 devices (which split is the
		// cost model's business).
		regexp.MustCompile(`fc\.matmul +MatMul +\[\[1, [1-8]\], \[[1-8], [1-8]\]\] +8 `),
		regexp.MustCompile(`wide_net on 8 devices: predicted step [0-9.]+ m?s .*fits the device's 128\.0 MiB`),
		regexp.MustCompile(`fc\.matmul +MatMul +\[\[1, 1\], \[1, 2\]\] +2 `),
	} {
		if !want.MatchString(out) {
			t.Errorf("plan output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "device0") {
		t.Errorf("plan started a rank:\n%s", out)
	}
}

// A semi_auto_parallel strategy that cannot run on the stage's devices is
// a validation error at its entry in the spec, before anything starts.
func TestValidateStrategyAtItsLine(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(spec, []byte(`version: 1
name: bad
cluster: {devices: 8}
stages:
  train:
    uses: npu/train
    with:
      data: /nonexistent
      model: semi_auto_net
      mode: semi_auto_parallel
      strategy:
        fc.matmul: [[1, 1], [1, 3]]
        fc.matmull: [[1, 1], [1, 2]]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "validate", spec)
	all := out + errOut
	if code == 0 {
		t.Fatalf("validate passed:\n%s", all)
	}
	for _, want := range []string{
		"bad.yaml:12:20: error: stages.train.with.strategy.fc.matmul: invalid shard strategy: operator fc.matmul (MatMul): the strategy uses 3 devices, which does not divide the job's 8",
		`bad.yaml:13:21: error: stages.train.with.strategy.fc.matmull: invalid shard strategy: semi_auto_net has no operator "fc.matmull"`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("validate output lacks %q:\n%s", want, all)
		}
	}
}

// A cluster given as a rank table is planned with the table's device
// count: mspipe ranktable generate writes it, plan reads it, and the
// machine defaults to the ascend910 preset with the table's 8 devices a
// server; --machine local and a machine file replace it.
func TestPlanReadsRankTable(t *testing.T) {
	dir := t.TempDir()
	if code, out, errOut := runCLI(t, "ranktable", "generate", "--scheme", "local", "--hosts", "4", "--devices", "8", "-o", filepath.Join(dir, "rt.json")); code != 0 {
		t.Fatalf("ranktable generate: exit %d\n%s%s", code, out, errOut)
	}
	spec := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(spec, []byte(`version: 1
name: cluster
cluster: {rank_table: rt.json}
stages:
  wide:
    uses: npu/train
    with: {data: /nonexistent, model: wide_net, mode: auto_parallel}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	machine := filepath.Join(dir, "slow.yaml")
	if err := os.WriteFile(machine, []byte("flops: 1e12\nmemory: 1GiB\ndevices_per_server: 4\nintra_server: {bandwidth: 1e10, latency: 1ms}\ninter_server: {bandwidth: 1e9, latency: 5ms}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{
			"machine: ascend910 (256 TFLOP/s and 32 GiB a device, 8 devices a server; links 30 GB/s and 10µs within a server, 12.5 GB/s and 30µs between servers)",
			"wide_net in auto_parallel on 32 devices, global batch 1024:",
			"fits the device's 32 GiB",
			"8 devices a server",
		}},
		{[]string{"--machine", "local"}, []string{"machine: local (this computer's simulated devices", "on 32 devices"}},
		// The file's figures, but the table's devices a server.
		{[]string{"--machine", machine}, []string{"machine: " + machine + " (1 TFLOP/s and 1 GiB a device, 8 devices a server;", "the device's 1 GiB"}},
	} {
		code, out, errOut := runCLI(t, append([]string{"plan", spec}, tc.args...)...)
		if code != 0 {
			t.Fatalf("plan %v: exit %d\n%s%s", tc.args, code, out, errOut)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("plan %v output lacks %q:\n%s", tc.args, want, out)
			}
		}
	}
	// A machine file with a mistake fails the command, naming file and key.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("flops: 1e12\nmemory: 1GiB\ndevices_per_server: 4\nintra_server: {bandwidth: 1e10, latency: 1ms}\ninter_server: {bandwith: 1e9, latency: 5ms}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "plan", spec, "--machine", bad)
	if want := bad + ":5:16: inter_server.bandwith: unknown key"; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("plan --machine bad.yaml: exit %d, stderr lacks %q:\n%s%s", code, want, out, errOut)
	}
}

// mspipe plan shows where an elastic stage goes on when one of its 8
// devices is lost: 7 are left, HCCL takes 4 on a server, and the seeds'
// strategy (fc.matmul split in two) fits them; the global batch of 16 is
// kept, 4 per device. A data_parallel stage of global batch 8 on 4
// devices goes to 2; a pipeline of 2 stages of 4 goes on as 2 stages of
// 2; a stage without on_failure: shrink is not listed.
func TestPlanShowsShrink(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "elastic.yaml")
	if err := os.WriteFile(spec, []byte(`version: 1
name: elastic
cluster: {devices: 8}
stages:
  semi:
    uses: npu/train
    with: {data: /nonexistent, model: semi_auto_net, mode: semi_auto_parallel, batch_size: 2, strategy: {fc.matmul: [[1, 1], [1, 2]]}, on_failure: shrink}
  dp:
    uses: npu/train
    cluster: {devices: 4}
    with: {data: /nonexistent, model: cnn, mode: data_parallel, batch_size: 2, on_failure: shrink, max_shrinks: 1}
  pipe:
    uses: npu/train
    with: {data: /nonexistent, model: cnn, mode: semi_auto_parallel, batch_size: 2, pipeline_stages: 2, micro_size: 4, strategy: {conv2: [[1, 1, 1, 1], [2, 1, 1, 1]]}, on_failure: shrink}
  plain:
    uses: npu/train
    with: {data: /nonexistent, model: cnn, mode: data_parallel}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "plan", spec)
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"on failure of semi (on_failure: shrink):\n  on failure: 8 → 4 devices (one device lost leaves 7; batch 2 → 4 per device, the global batch 16 kept)\n",
		"on failure of dp (on_failure: shrink):\n  on failure: 4 → 2 devices (one device lost leaves 3; batch 2 → 4 per device, the global batch 8 kept)\n",
		"on failure of pipe (on_failure: shrink):\n  on failure: 8 → 4 devices, 2 pipeline stages of 2 (one device lost leaves 7; batch 2 → 4 per device, each stage's global batch 8 kept)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "on failure of plain") {
		t.Errorf("plan lists a stage without on_failure: shrink:\n%s", out)
	}
}
