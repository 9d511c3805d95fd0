package trainer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/data"
)

// tinyData writes a small synthetic CIFAR set: 5 files of per images, and a
// test file of 40.
func tinyData(t *testing.T, per int) string {
	t.Helper()
	dir := t.TempDir()
	cfg := data.SynthConfig{Seed: 3, TrainPerBatch: per, TestRecords: 40}
	if err := data.WriteSynthetic(context.Background(), dir, cfg); err != nil {
		t.Fatal(err)
	}
	return dir
}

func tinyConfig(dataDir, ckptDir string) Config {
	return Config{
		DataDir: dataDir, Epochs: 2, BatchSize: 8, LearningRate: 0.05, Seed: 7,
		CkptDir: ckptDir, SaveCheckpointSteps: 3, KeepCheckpointMax: 10, Threads: 2,
	}
}

// readAll returns the checkpoints in dir by name (not their sidecars).
func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".ckpt" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// TestSameSeedBitIdenticalCheckpoints trains twice with the same config
// (once on 1 thread, once on 2) and compares every checkpoint byte.
func TestSameSeedBitIdenticalCheckpoints(t *testing.T) {
	dataDir := tinyData(t, 8) // 40 images: 5 steps of 8 per epoch
	a, b := t.TempDir(), t.TempDir()
	var logA bytes.Buffer
	cfgA := tinyConfig(dataDir, a)
	cfgA.Log = &logA
	cfgA.Threads = 1
	resA, err := Train(context.Background(), cfgA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Train(context.Background(), tinyConfig(dataDir, b)); err != nil {
		t.Fatal(err)
	}
	filesA, filesB := readAll(t, a), readAll(t, b)
	// Every 3 global steps (3, 6, 9), as MindSpore counts, and at the end (10).
	want := []string{"CKP-1_3.ckpt", "CKP-2_1.ckpt", "CKP-2_4.ckpt", "CKP-2_5.ckpt"}
	for _, name := range want {
		if filesA[name] == nil {
			t.Errorf("missing %s (have %v)", name, keys(filesA))
			continue
		}
		if !bytes.Equal(filesA[name], filesB[name]) {
			t.Errorf("%s differs between two runs with the same seed", name)
		}
	}
	if resA.GlobalStep != 10 {
		t.Errorf("global step %d, want 10", resA.GlobalStep)
	}
	// One LossMonitor line per epoch, in MindSpore's format.
	lines := strings.Split(strings.TrimSpace(logA.String()), "\n")
	re := regexp.MustCompile(`^epoch: [12] step: 5, loss is [0-9.]+(e-?[0-9]+)?$`)
	if len(lines) != 2 || !re.MatchString(lines[0]) || !re.MatchString(lines[1]) {
		t.Errorf("LossMonitor lines = %q", lines)
	}
	// The checkpoint holds parameters, then the optimizer state.
	tensors, err := ckpt.Read(filepath.Join(a, "CKP-2_5.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tt := range tensors {
		names[tt.Name] = true
	}
	for _, n := range []string{"conv1.weight", "bn1.moving_mean", "end_point.weight", "moments.conv1.weight", "global_step", "learning_rate", "momentum"} {
		if !names[n] {
			t.Errorf("checkpoint lacks %s", n)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestResumeEqualsUninterrupted stops after 3 steps, resumes, and expects the
// same final checkpoint bytes as a run that was never stopped.
func TestResumeEqualsUninterrupted(t *testing.T) {
	dataDir := tinyData(t, 8)
	full, parted := t.TempDir(), t.TempDir()
	if _, err := Train(context.Background(), tinyConfig(dataDir, full)); err != nil {
		t.Fatal(err)
	}
	first := tinyConfig(dataDir, parted)
	first.MaxSteps = 3
	if res, err := Train(context.Background(), first); err != nil || res.GlobalStep != 3 {
		t.Fatalf("first part: %v, %+v", err, res)
	}
	second := tinyConfig(dataDir, parted)
	second.Resume = true
	res, err := Train(context.Background(), second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(res.ResumedFrom, "CKP-1_3.ckpt") || res.Steps != 7 {
		t.Errorf("resumed from %q after %d steps, want CKP-1_3.ckpt and 7 more steps", res.ResumedFrom, res.Steps)
	}
	a, b := readAll(t, full), readAll(t, parted)
	if !bytes.Equal(a["CKP-2_5.ckpt"], b["CKP-2_5.ckpt"]) {
		t.Error("final checkpoint of the resumed run differs from the uninterrupted one")
	}
}

func TestRestoreReportsEveryMismatch(t *testing.T) {
	m, err := NewModel("resnet20", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tensors, err := Snapshot(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Drop one, reshape one, retype one, add a stranger.
	var bad []ckpt.Tensor
	for _, tt := range tensors {
		switch tt.Name {
		case "conv1.weight":
			continue
		case "end_point.bias":
			tt.Dims = []int64{5, 2}
		case "bn1.gamma":
			tt.DType = ckpt.DTypeFloat16
			tt.Data = tt.Data[:len(tt.Data)/2]
		}
		bad = append(bad, tt)
	}
	stranger, _ := ckpt.NewFloat32("fc.weight", []int64{1}, []float32{1})
	bad = append(bad, stranger)
	err = Restore(m, bad, RestoreOptions{})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err = %v, want ErrMismatch", err)
	}
	for _, want := range []string{
		"conv1.weight: missing",
		"end_point.bias: shape [5 2], the model wants [10]",
		"bn1.gamma: dtype Float16, the model wants Float32",
		"fc.weight: not a parameter of resnet20",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err := Restore(m, tensors, RestoreOptions{}); err != nil {
		t.Errorf("restoring its own snapshot: %v", err)
	}
}

func TestLossMonitorLine(t *testing.T) {
	var b bytes.Buffer
	LossMonitorLine(&b, 1, 156, 2.0084016)
	if got := b.String(); got != "epoch: 1 step: 156, loss is 2.0084016\n" {
		t.Errorf("got %q", got)
	}
}

func TestCancelStopsBetweenSteps(t *testing.T) {
	dataDir := tinyData(t, 8)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := tinyConfig(dataDir, t.TempDir())
	cfg.OnStep = func(s StepInfo) {
		if s.GlobalStep == 2 {
			cancel()
		}
	}
	res, err := Train(ctx, cfg)
	if !errors.Is(err, context.Canceled) || res.GlobalStep != 2 {
		t.Errorf("err %v at step %d, want context.Canceled at step 2", err, res.GlobalStep)
	}
}

// TestResumeSkipsDamagedCheckpoint flips one bit in the newest checkpoint
// of an interrupted run: resume must notice (every file has a sidecar
// digest, the file itself is plain protobuf as MindSpore writes by
// default), say which file it skipped, fall back to the previous one, and
// still end with the bytes of an uninterrupted run.
func TestResumeSkipsDamagedCheckpoint(t *testing.T) {
	dataDir := tinyData(t, 8)
	full, parted := t.TempDir(), t.TempDir()
	if _, err := Train(context.Background(), tinyConfig(dataDir, full)); err != nil {
		t.Fatal(err)
	}
	first := tinyConfig(dataDir, parted)
	first.MaxSteps = 6 // checkpoints after steps 3 and 6
	if _, err := Train(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	newest := filepath.Join(parted, "CKP-2_1.ckpt")
	raw, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ckpt.ReadVerified(newest)
	if err != nil || f.CRC || !f.Digest {
		t.Fatalf("trainer checkpoints must be plain protobuf with a sidecar digest: %+v, %v", f, err)
	}
	ckpttest.DecodeFile(t, newest) // what MindSpore and protoc read
	raw[len(raw)/2] ^= 0x10        // inside a tensor's float data
	if err := os.WriteFile(newest, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	second := tinyConfig(dataDir, parted)
	second.Resume = true
	second.Log = &log
	res, err := Train(context.Background(), second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(res.ResumedFrom, "CKP-1_3.ckpt") || res.Steps != 7 {
		t.Errorf("resumed from %q after %d steps, want CKP-1_3.ckpt and 7 more steps", res.ResumedFrom, res.Steps)
	}
	if !strings.Contains(log.String(), "resume: skipped "+newest+": ") || !strings.Contains(log.String(), "sha256 digest mismatch") {
		t.Errorf("log should name the skipped file and its digest failure:\n%s", log.String())
	}
	a, b := readAll(t, full), readAll(t, parted)
	if !bytes.Equal(a["CKP-2_5.ckpt"], b["CKP-2_5.ckpt"]) {
		t.Error("final checkpoint after skipping a damaged one differs from the uninterrupted run's")
	}
}

// TestCRCCheckWritesTrailer: crc_check on appends MindSpore's crc_num
// trailer (and still writes the sidecar); every file reads back verified.
func TestCRCCheckWritesTrailer(t *testing.T) {
	dataDir := tinyData(t, 8)
	dir := t.TempDir()
	cfg := tinyConfig(dataDir, dir)
	cfg.MaxSteps = 3
	cfg.CRCCheck = true
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	f, err := ckpt.ReadVerified(filepath.Join(dir, "CKP-1_3.ckpt"))
	if err != nil || !f.CRC || !f.Digest {
		t.Fatalf("crc_check: %+v, %v; want a trailer and a sidecar", f, err)
	}
}

// TestInitContinuesTheGlobalStep: a training started from another's
// checkpoint continues its optimizer's global step in its step events and
// result (train 1..7, retrain 8..17), while its epochs, steps and file
// names count from 1 as a new Model.train does; an interrupted retrain
// resumes at its own step and ends with the uninterrupted one's bytes.
func TestInitContinuesTheGlobalStep(t *testing.T) {
	dataDir := tinyData(t, 8) // 5 steps per epoch
	first := tinyConfig(dataDir, t.TempDir())
	first.MaxSteps = 7
	a, err := Train(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	if a.GlobalStep != 7 || filepath.Base(a.Checkpoint) != "CKP-2_2.ckpt" {
		t.Fatalf("first training: global step %d, checkpoint %s", a.GlobalStep, a.Checkpoint)
	}
	retrain := func(dir string, maxSteps int, resume bool) (*Result, []StepInfo) {
		cfg := tinyConfig(dataDir, dir)
		cfg.Init, cfg.MaxSteps, cfg.Resume = a.Checkpoint, maxSteps, resume
		var steps []StepInfo
		cfg.OnStep = func(s StepInfo) { steps = append(steps, s) }
		res, err := Train(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res, steps
	}
	full := t.TempDir()
	b, steps := retrain(full, 0, false)
	if len(steps) != 10 || steps[0].GlobalStep != 8 || steps[0].Epoch != 1 || steps[0].StepInEpoch != 1 ||
		steps[9].GlobalStep != 17 || steps[9].TotalSteps != 17 || b.GlobalStep != 17 {
		t.Fatalf("retrain: %d steps, first %+v, last %+v, result global step %d; want 10 steps, global 8..17", len(steps), steps[0], steps[len(steps)-1], b.GlobalStep)
	}
	if filepath.Base(b.Checkpoint) != "CKP-2_5.ckpt" || savedStep(t, b.Checkpoint) != 17 {
		t.Fatalf("retrain's last checkpoint %s holds global_step %d, want CKP-2_5.ckpt with 17", b.Checkpoint, savedStep(t, b.Checkpoint))
	}
	parted := t.TempDir()
	retrain(parted, 4, false) // interrupted after its step 4 (global 11)
	c, steps := retrain(parted, 0, true)
	if !strings.HasSuffix(c.ResumedFrom, "CKP-1_4.ckpt") || len(steps) != 6 || steps[0].GlobalStep != 12 || c.GlobalStep != 17 {
		t.Fatalf("resumed retrain from %q: %d steps from global %d to %d; want CKP-1_4.ckpt, 6 steps, 12..17", c.ResumedFrom, len(steps), steps[0].GlobalStep, c.GlobalStep)
	}
	if !bytes.Equal(readAll(t, full)["CKP-2_5.ckpt"], readAll(t, parted)["CKP-2_5.ckpt"]) {
		t.Error("the resumed retrain's last checkpoint differs from the uninterrupted one's")
	}
}

func savedStep(t *testing.T, path string) int {
	t.Helper()
	tensors, err := ckpt.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range tensors {
		if x.Name == "global_step" && len(x.Data) == 4 {
			return int(int32(binary.LittleEndian.Uint32(x.Data)))
		}
	}
	t.Fatalf("%s: no global_step", path)
	return 0
}

// TestEvaluationIsAnnounced: with Eval, the log says that evaluation
// starts after the last LossMonitor line, so a console following it does
// not go quiet; without Eval it does not.
func TestEvaluationIsAnnounced(t *testing.T) {
	dataDir := tinyData(t, 8)
	for _, eval := range []bool{true, false} {
		var log bytes.Buffer
		cfg := tinyConfig(dataDir, t.TempDir())
		cfg.Log, cfg.Eval = &log, eval
		res, err := Train(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(log.String()), "\n")
		last := lines[len(lines)-1]
		if eval && (last != "evaluating on the test set" || !strings.HasPrefix(lines[len(lines)-2], "epoch: 2 step: 5,") || math.IsNaN(res.Accuracy)) {
			t.Errorf("eval: log %q, accuracy %v", lines, res.Accuracy)
		}
		if !eval && strings.Contains(log.String(), "evaluating") {
			t.Errorf("no eval, but the log says %q", lines)
		}
	}
}

// TestInitAppliesItsOwnLearningRate: a training started from another's
// checkpoint applies the learning rate and schedule it was configured
// with, from its own first step, not the checkpoint's (a cosine schedule
// of another length used to fail: "learning_rate: shape [10], the model
// wants [1]"); its checkpoints hold its own schedule.
func TestInitAppliesItsOwnLearningRate(t *testing.T) {
	dataDir := tinyData(t, 8) // 5 steps per epoch
	first := tinyConfig(dataDir, t.TempDir())
	first.Schedule = "cosine" // 10 rates from 0.05
	a, err := Train(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		schedule string
		lr       float32
	}{{"constant", 0.2}, {"cosine", 0.2}} {
		cfg := tinyConfig(dataDir, t.TempDir())
		cfg.Init, cfg.LearningRate, cfg.Schedule, cfg.Epochs = a.Checkpoint, float64(tc.lr), tc.schedule, 1
		var rates []float32
		cfg.OnStep = func(s StepInfo) { rates = append(rates, s.LearningRate) }
		res, err := Train(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s retrain from a cosine checkpoint: %v", tc.schedule, err)
		}
		if len(rates) != 5 || math.Abs(float64(rates[0]-tc.lr)) > 1e-5 {
			t.Fatalf("%s: rates %v, want 5 starting at %g", tc.schedule, rates, tc.lr)
		}
		if tc.schedule == "constant" && rates[4] != tc.lr || tc.schedule == "cosine" && !(rates[4] < rates[0]) {
			t.Errorf("%s: rates %v", tc.schedule, rates)
		}
		tensors, err := ckpt.Read(res.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range tensors {
			if x.Name == "learning_rate" {
				want := int64(1)
				if tc.schedule == "cosine" {
					want = 5
				}
				if len(x.Dims) != 1 || x.Dims[0] != want {
					t.Errorf("%s: saved learning_rate dims %v, want [%d]", tc.schedule, x.Dims, want)
				}
			}
		}
		if res.GlobalStep != 15 {
			t.Errorf("%s: global step %d, want 15 (10 + 5)", tc.schedule, res.GlobalStep)
		}
	}
}
