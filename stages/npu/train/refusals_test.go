package train_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/stages/npu/train"
)

// Options that do not fit the mode are refused at validation, naming the
// field; a strategy that cannot run on the stage's cluster is refused by
// Run before any rank starts, and the job leaves nothing behind.
func TestRefusals(t *testing.T) {
	dataDir := synthData(t, 4)
	matmul := map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}
	for _, tc := range []struct {
		name, path, what string
		with             map[string]any
		atValidate       bool
	}{
		{"strategy in data_parallel", "/strategy", "shard strategies are for semi_auto_parallel",
			map[string]any{"mode": "data_parallel", "strategy": matmul}, true},
		{"unknown operator", "/strategy", `semi_auto_net has no operator "fc.matmull" (operators: flatten, fc.matmul, relu, end_point.matmul, end_point.bias_add, loss)`,
			map[string]any{"mode": "semi_auto_parallel", "model": "semi_auto_net", "strategy": map[string]any{"fc.matmull": []any{[]any{1, 1}, []any{1, 2}}}}, false},
		{"devices not divided", "/strategy", "operator fc.matmul (MatMul): the strategy uses 3 devices, which does not divide the job's 2",
			map[string]any{"mode": "semi_auto_parallel", "model": "semi_auto_net", "strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 3}}}}, false},
		{"hybrid_net elsewhere", "/model", "it runs in mode hybrid_parallel",
			map[string]any{"mode": "semi_auto_parallel", "model": "hybrid_net"}, true},
		{"parallel_optimizer in hybrid_parallel", "/parallel_optimizer", "for data_parallel, semi_auto_parallel and auto_parallel, not hybrid_parallel",
			map[string]any{"mode": "hybrid_parallel", "model": "hybrid_net", "parallel_optimizer": true}, true},
		{"shard size without the parallel optimizer", "/optimizer_weight_shard_size", "optimizer_weight_shard_size needs parallel_optimizer: true",
			map[string]any{"mode": "data_parallel", "optimizer_weight_shard_size": 2}, true},
		{"shard size not dividing the devices", "/optimizer_weight_shard_size", "optimizer_weight_shard_size 3 does not divide the stage's 2 devices",
			map[string]any{"mode": "data_parallel", "parallel_optimizer": true, "optimizer_weight_shard_size": 3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := validate(t, withBlock(dataDir, tc.with))
			if tc.atValidate && (len(problems) != 1 || problems[0].Path != tc.path || !strings.Contains(problems[0].Message, tc.what)) {
				t.Errorf("problems %+v, want one at %s saying %s", problems, tc.path, tc.what)
			}
			work := t.TempDir()
			r := runStage(context.Background(), work, 2, 1, withBlock(dataDir, tc.with))
			if r.err == nil || !strings.Contains(r.err.Error(), tc.what) {
				t.Errorf("Run: %v, want an error saying %s", r.err, tc.what)
			}
			if !strings.Contains(r.err.Error(), tc.path) {
				t.Errorf("Run: %v, want the field %s named", r.err, tc.path)
			}
			if entries, _ := os.ReadDir(work); len(entries) != 0 {
				t.Errorf("a refused job left %d entries in its work dir", len(entries))
			}
		})
	}
	problems := validate(t, withBlock(dataDir, map[string]any{"mode": "stand_alone", "parallel_optimizer": true}))
	if len(problems) != 1 || problems[0].Path != "/parallel_optimizer" || !strings.Contains(problems[0].Message, "not stand_alone") {
		t.Errorf("parallel_optimizer in stand_alone: problems %+v, want one at /parallel_optimizer", problems)
	}
	for _, mode := range []string{"stand_alone", "data_parallel", "semi_auto_parallel", "auto_parallel", "hybrid_parallel"} {
		if problems := validate(t, withBlock(dataDir, map[string]any{"mode": mode})); len(problems) != 0 {
			t.Errorf("mode %s: problems %+v, want none", mode, problems)
		}
	}
}

// device_memory accepts sizes from 1MiB to 1024TiB in bytes or binary
// units and refuses anything else at validation.
func TestValidateDeviceMemory(t *testing.T) {
	dataDir := t.TempDir()
	for _, ok := range []string{"32GiB", "1.5GiB", "512MiB", "1MiB", "1024TiB", "1048576", "2097152B", "4096KiB", "32GB"} {
		if problems := validate(t, withBlock(dataDir, map[string]any{"device_memory": ok})); len(problems) != 0 {
			t.Errorf("device_memory %q: problems %+v, want none", ok, problems)
		}
	}
	for _, bad := range []string{"lots", "100KiB", "1.5B", "-1GiB", "2048TiB", "1048575", "GiB", " "} {
		problems := validate(t, withBlock(dataDir, map[string]any{"device_memory": bad}))
		if len(problems) != 1 || problems[0].Path != "/device_memory" || !strings.Contains(problems[0].Message, "want a size from 1MiB to 1024TiB") {
			t.Errorf("device_memory %q: problems %+v, want one at /device_memory", bad, problems)
		}
	}
}

func validate(t *testing.T, with map[string]any) []plugins.Problem {
	t.Helper()
	problems, err := train.New().Validate(context.Background(), plugins.ValidateRequest{With: with})
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// Jobs the stage cannot run fail before any rank starts, saying why.
func TestRunRefusesBadJobs(t *testing.T) {
	dataDir := synthData(t, 8)
	for _, tc := range []struct {
		name    string
		devices int
		with    map[string]any
		message string
	}{
		{"stand_alone on 2 devices", 2, map[string]any{"mode": "stand_alone"}, "mode stand_alone trains on one device, but the stage's cluster has 2"},
		{"relative data path", 1, map[string]any{"data": "cifar-10-batches-bin"}, "give an absolute path"},
		{"missing data", 1, map[string]any{"data": filepath.Join(dataDir, "missing")}, "not a directory"},
		{"data is a file", 1, map[string]any{"data": filepath.Join(dataDir, "data_batch_1.bin")}, "not a directory"},
		{"missing init", 1, map[string]any{"init": filepath.Join(dataDir, "missing.ckpt")}, "init:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			r := runStage(context.Background(), work, tc.devices, 1, withBlock(dataDir, tc.with))
			if r.err == nil || !strings.Contains(r.err.Error(), tc.message) {
				t.Fatalf("Run: %v, want an error saying %q", r.err, tc.message)
			}
			if _, err := os.Stat(filepath.Join(work, "device0")); err == nil {
				t.Errorf("a refused job started rank 0")
			}
		})
	}
}

// A device smaller than the job fails the stage with the rank's
// out-of-memory error, naming the buffer that did not fit.
func TestRunDeviceMemoryTooSmall(t *testing.T) {
	dataDir := synthData(t, 8)
	r := runStage(context.Background(), t.TempDir(), 1, 1, withBlock(dataDir, map[string]any{"device_memory": "1MiB", "batch_size": 32}))
	if r.err == nil || !strings.Contains(r.err.Error(), "out of device memory") || !strings.Contains(r.err.Error(), "float32[") {
		t.Fatalf("Run on a 1 MiB device: %v, want the rank's out-of-memory error naming a buffer", r.err)
	}
}

// The stage trusts only what every rank reports: a rank that exits cleanly
// without a result, or with one that is not JSON, fails the stage naming
// the rank.
func TestRunRejectsMissingOrBrokenResults(t *testing.T) {
	dataDir := synthData(t, 8)
	for _, tc := range []struct {
		result, message string
	}{
		{"", "rank 0 left no result"},
		{"{", "rank 0 result.json"},
	} {
		t.Setenv(brokenResultEnv, tc.result)
		work := t.TempDir()
		// A result.json of an earlier attempt must not be taken for this one's.
		if err := os.MkdirAll(filepath.Join(work, "device0"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "device0", "result.json"), []byte(`{"rank": 0, "loss": 1}`), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runStage(context.Background(), work, 1, 1, withBlock(dataDir, map[string]any{"mode": "stand_alone"}))
		if r.err == nil || !strings.Contains(r.err.Error(), tc.message) {
			t.Errorf("result %q: Run: %v, want an error saying %q", tc.result, r.err, tc.message)
		}
	}
}

// job.Run run in this process on the worker.json the stage wrote, with
// the seeds' environment, trains exactly what the stage's rank process
// trained; without that environment or with a broken config it refuses.
func TestRunWorkerInProcess(t *testing.T) {
	dataDir := synthData(t, 8) // 40 images: 10 steps of 4
	jobDir := t.TempDir()
	r := mustRun(t, jobDir, 1, withBlock(dataDir, map[string]any{"mode": "stand_alone", "eval": true}))
	if acc, ok := r.outputs["accuracy"].(float64); !ok || acc < 0 || acc > 1 {
		t.Errorf("accuracy output %v, want a fraction (eval is on)", r.outputs["accuracy"])
	}
	cfgPath := filepath.Join(jobDir, "worker.json")

	here := t.TempDir()
	t.Chdir(here)
	if err := job.Run(context.Background(), cfgPath); err == nil || !strings.Contains(err.Error(), "RANK_ID is not set") {
		t.Errorf("without RANK_ID: %v", err)
	}
	t.Setenv("RANK_ID", "zero")
	if err := job.Run(context.Background(), cfgPath); err == nil || !strings.Contains(err.Error(), "RANK_ID=zero is not a rank number") {
		t.Errorf("RANK_ID=zero: %v", err)
	}
	t.Setenv("RANK_ID", "0")
	t.Setenv("RANK_SIZE", "1")
	t.Setenv("DEVICE_ID", "-1")
	if err := job.Run(context.Background(), cfgPath); err == nil || !strings.Contains(err.Error(), "DEVICE_ID=-1 is not a rank number") {
		t.Errorf("DEVICE_ID=-1: %v", err)
	}
	t.Setenv("DEVICE_ID", "0")
	if err := job.Run(context.Background(), filepath.Join(here, "missing.json")); err == nil || !strings.Contains(err.Error(), "worker config") {
		t.Errorf("missing config: %v", err)
	}
	broken := filepath.Join(here, "broken.json")
	if err := os.WriteFile(broken, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := job.Run(context.Background(), broken); err == nil || !strings.Contains(err.Error(), broken) {
		t.Errorf("broken config: %v", err)
	}
	// data_parallel needs the rank table the launcher names.
	t.Setenv("RANK_TABLE_FILE", "")
	dp := editWorkerConfig(t, cfgPath, filepath.Join(here, "dp.json"), func(cfg map[string]any) { cfg["mode"] = "data_parallel" })
	if err := job.Run(context.Background(), dp); err == nil || !strings.Contains(err.Error(), "RANK_TABLE_FILE is not set") {
		t.Errorf("data_parallel without a rank table: %v", err)
	}

	inProcess := editWorkerConfig(t, cfgPath, filepath.Join(here, "worker.json"), func(map[string]any) {})
	if err := job.Run(context.Background(), inProcess); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(here, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got job.Result
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := workerResult(t, jobDir, 0)
	if got.GlobalStep != 10 || got.GlobalStep != want.GlobalStep || got.Loss != want.Loss || got.Accuracy != want.Accuracy {
		t.Errorf("in process: step %d, loss %v, accuracy %v; rank process: step %d, loss %v, accuracy %v",
			got.GlobalStep, got.Loss, got.Accuracy, want.GlobalStep, want.Loss, want.Accuracy)
	}
	if filepath.Dir(got.Checkpoint) != filepath.Join(here, "ckpt_0") {
		t.Errorf("checkpoint %s, want one in ckpt_0 of the current directory", got.Checkpoint)
	}
	mine, theirs := readTensors(t, got.Checkpoint), readTensors(t, want.Checkpoint)
	for _, name := range sortedNames(theirs) {
		if string(mine[name].Data) != string(theirs[name].Data) {
			t.Errorf("%s differs between the in-process worker and the rank process", name)
		}
	}
	if _, err := ckpt.Latest(filepath.Join(here, "ckpt_0"), ""); err != nil {
		t.Error(err)
	}
}

// editWorkerConfig copies the worker config at from to to, changed by
// edit, and returns to. (The event stream's descriptor is
// not in the config: only the stage's rank processes get it, in their
// environment.)
func editWorkerConfig(t *testing.T, from, to string, edit func(cfg map[string]any)) string {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return to
}
