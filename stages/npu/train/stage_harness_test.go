package train_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/stages/npu/train"
)

// TestMain makes the test binary its own rank process: the stage starts
// os.Executable() with the hidden worker command, as the mspipe binary does
// (cmd/mspipe/internal/cli), so the tests below run the production stage and worker,
// not a copy of their wiring.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == job.Command {
		if prefix := os.Getenv(crashAtEnv); prefix != "" && os.Getenv("RANK_ID") == "0" {
			crashAtLine(prefix)
		}
		if spec := os.Getenv(stopAtEnv); spec != "" {
			stopAtLine(spec)
		}
		if spec := os.Getenv(hangAtEnv); spec != "" {
			hangAtLine(spec)
		}
		if os.Getenv(fullLogEnv) != "" {
			logToFullDisk()
		}
		if result, ok := os.LookupEnv(brokenResultEnv); ok {
			leaveBrokenResult(result)
		}
		// Like cmd/mspipe: SIGTERM from the launcher cancels training,
		// which then stops after its last complete checkpoint.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := job.Run(ctx, os.Args[2])
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashAtEnv makes rank 0 of a job started by a test kill itself with
// SIGKILL when it prints a line starting with the variable's value: a crash
// at a known point of training, with no chance to clean up.
const crashAtEnv = "NPU_TRAIN_TEST_CRASH_AT"

// crashAtLine puts a pipe in front of stdout, which the worker's
// LossMonitor lines go to, and kills the process on the first line that
// starts with prefix.
func crashAtLine(prefix string) {
	onLine(prefix, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
}

// onLine puts a pipe in front of stdout and calls do, once, on the first
// line that starts with prefix.
func onLine(prefix string, do func()) {
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	stdout := os.Stdout
	os.Stdout = w
	go func() {
		lines, done := bufio.NewScanner(r), false
		for lines.Scan() {
			fmt.Fprintln(stdout, lines.Text())
			if !done && strings.HasPrefix(lines.Text(), prefix) {
				done = true
				do()
			}
		}
	}()
}

// stopAtEnv, "<rank>:<prefix>", makes that rank of a job started by a test
// stop itself with SIGSTOP when it prints a line starting with prefix: a
// rank that is alive but silent, as a hung host or a debugger leaves it.
// Just before, it writes the time to faultAtFile in its device directory.
const stopAtEnv = "NPU_TRAIN_TEST_STOP_AT"

// hangAtEnv, "<rank>:<prefix>", makes that rank hang when it prints a line
// starting with prefix: its stdout stops draining, so training blocks in
// its next LossMonitor line (a log on a stuck disk), while the rest of the
// process, heartbeats included, runs on. It writes faultAtFile first.
const hangAtEnv = "NPU_TRAIN_TEST_HANG_AT"

// faultAtFile holds the Unix time in nanoseconds at which a rank stopped
// or hung itself (stopAtEnv, hangAtEnv).
const faultAtFile = "fault-at"

func stopAtLine(spec string) {
	faultAtLine(spec, func(io.Writer) { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) })
}

func hangAtLine(spec string) {
	faultAtLine(spec, func(stdout io.Writer) {
		// Fill the pipe nobody reads any more: the next write blocks.
		filler := make([]byte, 4096)
		for {
			if _, err := stdout.Write(filler); err != nil {
				return
			}
		}
	})
}

// faultAtLine runs fault, on the rank spec ("<rank>:<prefix>") names, when
// it prints a line starting with prefix; fault gets the stdout the rank's
// training writes to.
func faultAtLine(spec string, fault func(stdout io.Writer)) {
	rank, prefix, ok := strings.Cut(spec, ":")
	if !ok || os.Getenv("RANK_ID") != rank {
		return
	}
	onLine(prefix, func() {
		_ = os.WriteFile(faultAtFile, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644)
		fault(os.Stdout)
	})
}

// fullLogEnv makes every rank of a job started by a test write its stdout
// and stderr (train.log{i}) to /dev/full, where every write fails with
// ENOSPC: a log on a full disk.
const fullLogEnv = "NPU_TRAIN_TEST_FULL_LOG"

func logToFullDisk() {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err == nil {
		err = syscall.Dup2(int(full.Fd()), 1)
	}
	if err == nil {
		err = syscall.Dup2(int(full.Fd()), 2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// brokenResultEnv makes a rank process started by a test exit 0 at once,
// without training, leaving the variable's value as its result.json (no
// file when the value is empty): a rank that did not keep its contract.
const brokenResultEnv = "NPU_TRAIN_TEST_BROKEN_RESULT"

func leaveBrokenResult(result string) {
	if result != "" {
		if err := os.WriteFile("result.json", []byte(result), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
	}
	os.Exit(0)
}

// synthData writes a synthetic CIFAR-10 data set of 5×perBatch training
// images and returns its cifar-10-batches-bin directory.
func synthData(t *testing.T, perBatch int) string {
	t.Helper()
	root := t.TempDir()
	synth := data.SynthConfig{Seed: 7, TrainPerBatch: perBatch, TestRecords: 20}
	m, err := data.Prepare(context.Background(), root, data.PrepareOptions{Source: data.SourceSynthetic, Synth: synth})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, filepath.Base(m.DataDir))
}

// stageRun is one call of the stage's Run and what it reported.
type stageRun struct {
	outputs map[string]any
	err     error

	mu     sync.Mutex
	events []plugins.Event
}

func (r *stageRun) logs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.Log != nil {
			out = append(out, e.Log.Message)
		}
	}
	return out
}

// runStage runs npu/train in workDir on devices simulated devices.
func runStage(ctx context.Context, workDir string, devices, attempt int, with map[string]any) *stageRun {
	r := &stageRun{}
	req := plugins.RunRequest{
		RunID: "test", StageID: "train", With: with, WorkDir: workDir,
		Cluster: plugins.Cluster{Devices: devices}, Attempt: attempt,
	}
	r.outputs, r.err = train.New().Run(ctx, req, func(e plugins.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	})
	return r
}

// mustRun runs the stage and fails the test when it fails.
func mustRun(t *testing.T, workDir string, devices int, with map[string]any) *stageRun {
	t.Helper()
	r := runStage(context.Background(), workDir, devices, 1, with)
	if r.err != nil {
		t.Fatalf("npu/train on %d device(s): %v", devices, r.err)
	}
	return r
}

// withBlock is a small, fast `with` block over dataDir: the BatchNorm-free
// CNN, one compute thread per device, no evaluation, and no shuffle buffer
// (the sampler's permutation and the augmentations are functions of the
// global sample position, so sharded data parallel and stand_alone then
// read the same global batches). extra overrides entries.
func withBlock(dataDir string, extra map[string]any) map[string]any {
	w := map[string]any{
		"data": dataDir, "model": "cnn", "epochs": 1, "batch_size": 4,
		"learning_rate": 0.01, "seed": 3, "threads": 1, "eval": false,
		"shuffle_buffer": -1,
	}
	for k, v := range extra {
		w[k] = v
	}
	return w
}

// workerResult reads the result.json a rank left in the job directory.
func workerResult(t *testing.T, jobDir string, rank int) job.Result {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(launch.DeviceDir(jobDir, rank), "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res job.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("rank %d result.json: %v", rank, err)
	}
	return res
}

// lastCheckpoint is the newest checkpoint in rank's ckpt_{rank}/.
func lastCheckpoint(t *testing.T, jobDir string, rank int) string {
	t.Helper()
	dir := filepath.Join(launch.DeviceDir(jobDir, rank), fmt.Sprintf("ckpt_%d", rank))
	path, err := ckpt.Latest(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// readTensors reads a checkpoint into a map by tensor name.
func readTensors(t *testing.T, path string) map[string]ckpt.Tensor {
	t.Helper()
	tensors, err := ckpt.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]ckpt.Tensor, len(tensors))
	for _, tt := range tensors {
		out[tt.Name] = tt
	}
	return out
}
