package trainer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"syscall"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
)

// readWithSidecars returns every file of dir by name: checkpoints, their
// sidecar digests, and anything else left there.
func readWithSidecars(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// TestAsyncSaveWritesTheSameFiles saves after every step, once
// synchronously and once with async_save, with keep_checkpoint_max
// pruning: the directories must hold the same files, byte for byte
// (sidecars included), the result must name the last checkpoint once it
// is committed, and the staging buffer must have held one checkpoint.
func TestAsyncSaveWritesTheSameFiles(t *testing.T) {
	dataDir := tinyData(t, 8) // 5 steps per epoch, 10 in all
	syncDir, asyncDir := t.TempDir(), t.TempDir()
	configure := func(dir string, async bool) Config {
		cfg := tinyConfig(dataDir, dir)
		cfg.SaveCheckpointSteps, cfg.KeepCheckpointMax, cfg.AsyncSave = 1, 3, async
		return cfg
	}
	syncRes, err := Train(context.Background(), configure(syncDir, false))
	if err != nil {
		t.Fatal(err)
	}
	var steps []StepInfo
	asyncCfg := configure(asyncDir, true)
	asyncCfg.OnStep = func(s StepInfo) { steps = append(steps, s) }
	asyncRes, err := Train(context.Background(), asyncCfg)
	if err != nil {
		t.Fatal(err)
	}
	a, b := readWithSidecars(t, syncDir), readWithSidecars(t, asyncDir)
	want := []string{"CKP-2_3.ckpt", "CKP-2_4.ckpt", "CKP-2_5.ckpt"}
	if len(a) != 2*len(want) || len(b) != len(a) {
		t.Fatalf("sync kept %v, async %v; want %v and their sidecars", keys(a), keys(b), want)
	}
	for name, data := range a {
		if !bytes.Equal(data, b[name]) {
			t.Errorf("%s differs between the synchronous and the asynchronous save", name)
		}
	}
	final := filepath.Join(asyncDir, "CKP-2_5.ckpt")
	if asyncRes.Checkpoint != final || syncRes.Checkpoint != filepath.Join(syncDir, "CKP-2_5.ckpt") {
		t.Errorf("result checkpoints %q (async) and %q (sync), want CKP-2_5.ckpt of each", asyncRes.Checkpoint, syncRes.Checkpoint)
	}
	f, err := ckpt.ReadVerified(final)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, tt := range f.Tensors {
		size += int64(len(tt.Data))
	}
	if asyncRes.PeakSaveStaging != size || syncRes.PeakSaveStaging != 0 {
		t.Errorf("staging peak %d bytes (async) and %d (sync), want one checkpoint's %d and 0", asyncRes.PeakSaveStaging, syncRes.PeakSaveStaging, size)
	}
	if len(steps) != 10 {
		t.Fatalf("%d step reports, want 10", len(steps))
	}
	for _, s := range steps {
		if s.Checkpoint == "" || s.SaveBlocked <= 0 || s.SaveWait > s.SaveBlocked {
			t.Errorf("step %d: checkpoint %q, blocked %v, of which waiting %v: want a file and a positive time that includes the wait", s.GlobalStep, s.Checkpoint, s.SaveBlocked, s.SaveWait)
		}
	}
}

// heapAllocated is the bytes the process has allocated on the heap so far.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestAsyncSaveMemoryIsOneCheckpoint trains ResNet-20 with a checkpoint
// after every step, async_save on, and the same steps with saving off, and
// compares what the two allocated on the heap. Every byte saving keeps
// alive at its peak was allocated, so the difference bounds the host
// memory saving adds: it must be at most one checkpoint slice of the rank
// (the staging buffer, reused by every save) plus the encoder's buffer
// (the largest tensor's message, also reused) plus perSave for each save
// (file names, directory listings for pruning, protobuf headers, hashing
// state; about 50 KiB each here). Copying a fresh snapshot every step, as
// the first async_save did, allocated a whole checkpoint per save.
func TestAsyncSaveMemoryIsOneCheckpoint(t *testing.T) {
	const perSave = 256 << 10
	dataDir := tinyData(t, 8) // 5 steps of 8 images
	run := func(ckptDir string) (*Result, uint64) {
		cfg := tinyConfig(dataDir, ckptDir)
		cfg.Epochs, cfg.SaveCheckpointSteps, cfg.KeepCheckpointMax, cfg.AsyncSave = 1, 1, 2, true
		before := heapAllocated()
		res, err := Train(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res, heapAllocated() - before
	}
	_, off := run("")
	dir := t.TempDir()
	res, async := run(dir)
	if res.Saves != 5 {
		t.Fatalf("%d saves, want one per step (5)", res.Saves)
	}
	f, err := ckpt.ReadVerified(res.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	var slice, largest int64
	for _, tt := range f.Tensors {
		slice += int64(len(tt.Data))
		largest = max(largest, int64(len(tt.Data)))
	}
	info, err := os.Stat(res.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	// The encoder's buffer holds ckpt.EncodeBufferBytes, or one message (the
	// tensor and its name, dims and type) when that is larger.
	encoder := max(largest+1024, ckpt.EncodeBufferBytes)
	bound := slice + encoder + int64(res.Saves)*perSave
	t.Logf("checkpoint %d bytes on disk, %d of tensor data (largest %d); staging peak %d; heap allocated: %d saving off, %d with async_save (+%d, bound %d)",
		info.Size(), slice, largest, res.PeakSaveStaging, off, async, int64(async)-int64(off), bound)
	if res.PeakSaveStaging != slice || slice > info.Size() {
		t.Errorf("staging peak %d bytes, want the checkpoint's %d bytes of tensor data (its file: %d bytes)", res.PeakSaveStaging, slice, info.Size())
	}
	if grew := int64(async) - int64(off); grew > bound {
		t.Errorf("async_save allocated %d bytes more than saving off over %d saves; want at most one checkpoint (%d) + the encoder's buffer (%d) + %d per save = %d",
			grew, res.Saves, slice, encoder, perSave, bound)
	}
}

// TestExceptionSaveWritesTheLastGoodState fails the gradient reduction of
// step 5 (as a peer's death fails it): exception_save must write the state
// after step 4, before the failing step's forward pass changed BatchNorm's
// moving statistics, so its bytes equal the regular checkpoint of step 4.
func TestExceptionSaveWritesTheLastGoodState(t *testing.T) {
	dataDir := tinyData(t, 8)
	dir := t.TempDir()
	cfg := tinyConfig(dataDir, dir)
	cfg.SaveCheckpointSteps, cfg.ExceptionSave = 2, true
	peerDied := errors.New("peer rank 1 closed the connection")
	calls := 0
	cfg.Reduce = func(context.Context, []float32) error {
		if calls++; calls == 5 {
			return peerDied
		}
		return nil
	}
	var log bytes.Buffer
	cfg.Log = &log
	res, err := Train(context.Background(), cfg)
	if !errors.Is(err, peerDied) {
		t.Fatalf("err %v, want the reduction's", err)
	}
	bp := filepath.Join(dir, "CKP-1_4_breakpoint.ckpt")
	if res.Breakpoint != bp {
		t.Errorf("breakpoint %q, want %s", res.Breakpoint, bp)
	}
	got, err := ckpt.ReadVerified(bp)
	if err != nil {
		t.Fatal(err)
	}
	regular, _ := os.ReadFile(filepath.Join(dir, "CKP-1_4.ckpt"))
	if raw, _ := os.ReadFile(bp); !bytes.Equal(raw, regular) {
		t.Error("the breakpoint differs from the regular checkpoint of the same step")
	}
	m, err := NewModel("resnet20", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Restore(m, got.Tensors, RestoreOptions{}); err != nil {
		t.Errorf("the breakpoint does not load: %v", err)
	}
	if !strings.Contains(log.String(), "before the failing step 5") {
		t.Errorf("log %q does not say what was saved", log.String())
	}
	// Resume skips it: the series' newest checkpoint is still CKP-1_4.
	if p, _ := ckpt.Latest(dir, "CKP"); filepath.Base(p) != "CKP-1_4.ckpt" {
		t.Errorf("Latest = %s, want CKP-1_4.ckpt", p)
	}
}

// TestFaultIsChecked refuses a fault at a step the run does not have, or
// during a save at a step that saves nothing, and fires a kill at its step.
func TestFaultIsChecked(t *testing.T) {
	dataDir := tinyData(t, 8)
	for _, f := range []Fault{{Step: 11}, {Step: 0}, {Step: 4, DuringSave: true}} {
		cfg := tinyConfig(dataDir, t.TempDir())
		cfg.Fault = &Fault{Step: f.Step, DuringSave: f.DuringSave, Act: func() { t.Error("the fault fired") }}
		if _, err := Train(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("fault %+v: err %v, want ErrConfig", f, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := tinyConfig(dataDir, t.TempDir())
	done, firedAfter := 0, -1
	cfg.OnStep = func(StepInfo) { done++ }
	cfg.Fault = &Fault{Step: 4, Act: func() { firedAfter = done; cancel() }}
	if _, err := Train(ctx, cfg); !errors.Is(err, context.Canceled) || firedAfter != 3 {
		t.Errorf("err %v, fault fired after %d steps: want it to fire before step 4", err, firedAfter)
	}
}

const killEnv = "MSPIPE_TEST_ASYNC_KILL_DIRS"

// TestHelperKilledDuringAsyncSave is the process that
// TestKillDuringAsyncSaveLeavesVerifiedCheckpoints kills: it trains with
// async_save and SIGKILLs itself part-way through writing the checkpoint
// of step 6.
func TestHelperKilledDuringAsyncSave(t *testing.T) {
	dirs := os.Getenv(killEnv)
	if dirs == "" {
		t.Skip("run by TestKillDuringAsyncSaveLeavesVerifiedCheckpoints")
	}
	dataDir, ckptDir, _ := strings.Cut(dirs, string(os.PathListSeparator))
	cfg := tinyConfig(dataDir, ckptDir)
	cfg.AsyncSave = true
	cfg.Fault = &Fault{Step: 6, DuringSave: true, Act: func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}}
	_, err := Train(context.Background(), cfg)
	t.Fatalf("training was not killed: %v", err)
}

// TestKillDuringAsyncSaveLeavesVerifiedCheckpoints kills a training (kill
// -9) while its writer goroutine is in the middle of a checkpoint: every
// checkpoint left must verify, the torn one must not be there under its
// name, and resuming must end bit-identical to an uninterrupted run.
func TestKillDuringAsyncSaveLeavesVerifiedCheckpoints(t *testing.T) {
	dataDir := tinyData(t, 8)
	full, killed := t.TempDir(), t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperKilledDuringAsyncSave$", "-test.count=1")
	cmd.Env = append(os.Environ(), killEnv+"="+dataDir+string(os.PathListSeparator)+killed)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper: %v, want it killed by SIGKILL\n%s", err, out)
	}
	names := keys(readWithSidecars(t, killed))
	var ckpts []string
	for _, n := range names {
		if filepath.Ext(n) == ".ckpt" && !strings.HasPrefix(n, ".") {
			ckpts = append(ckpts, n)
			if _, err := ckpt.ReadVerified(filepath.Join(killed, n)); err != nil {
				t.Errorf("left a checkpoint that does not verify: %v", err)
			}
		}
	}
	// Saves every 3 steps: step 3's is committed, step 6's was torn.
	if len(ckpts) != 1 || ckpts[0] != "CKP-1_3.ckpt" {
		t.Errorf("checkpoints left %v (all files %v), want only CKP-1_3.ckpt", ckpts, names)
	}
	if _, err := Train(context.Background(), tinyConfig(dataDir, full)); err != nil {
		t.Fatal(err)
	}
	resume := tinyConfig(dataDir, killed)
	resume.Resume, resume.AsyncSave = true, true
	res, err := Train(context.Background(), resume)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(res.ResumedFrom) != "CKP-1_3.ckpt" {
		t.Errorf("resumed from %q, want CKP-1_3.ckpt", res.ResumedFrom)
	}
	a, b := readAll(t, full), readAll(t, killed)
	if len(a) != len(b) {
		t.Errorf("uninterrupted run kept %v, the resumed one %v", keys(a), keys(b))
	}
	for name, data := range a {
		if !bytes.Equal(data, b[name]) {
			t.Errorf("%s of the resumed run differs from the uninterrupted one", name)
		}
	}
}
