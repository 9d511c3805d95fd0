package train_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
)

// ckptFiles returns the regular checkpoints (and sidecars) in rank's
// ckpt_{rank}/ by name; breakpoints and temporary files are left out.
func ckptFiles(t *testing.T, jobDir string, rank int) map[string][]byte {
	t.Helper()
	dir := filepath.Join(launch.DeviceDir(jobDir, rank), fmt.Sprintf("ckpt_%d", rank))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.Contains(name, "_breakpoint") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// TestFaultExceptionSaveAndAsyncResume runs a 2-device data parallel job
// with async_save and exception_save whose rank 1 is killed (the fault
// input) at step 5. The stage must fail naming rank 1; rank 0 must leave a
// verified breakpoint of step 4 equal to its regular checkpoint of step 4;
// the retried stage must not kill rank 1 again, must resume, and must end
// with every rank's checkpoints byte-identical to an uninterrupted run
// that saved synchronously.
func TestFaultExceptionSaveAndAsyncResume(t *testing.T) {
	dataDir := synthData(t, 8) // 40 images: 5 steps of 2×4 per epoch
	base := map[string]any{
		"mode": "data_parallel", "epochs": 2, "save_checkpoint_steps": 2, "keep_checkpoint_max": 3,
		"log_steps": 1, "collective_timeout": "20s",
	}
	whole := t.TempDir()
	mustRun(t, whole, 2, withBlock(dataDir, base))

	extra := map[string]any{"async_save": true, "exception_save": true, "fault": map[string]any{"rank": 1, "step": 5}}
	for k, v := range base {
		extra[k] = v
	}
	with := withBlock(dataDir, extra)
	jobDir := t.TempDir()
	first := runStage(t.Context(), jobDir, 2, 1, with)
	if first.err == nil || !errors.Is(first.err, launch.ErrRankFailed) || !strings.Contains(first.err.Error(), "rank 1") {
		t.Fatalf("attempt 1: %v, want rank 1 failed", first.err)
	}
	if _, err := os.Stat(filepath.Join(launch.DeviceDir(jobDir, 1), job.FaultFiredFile)); err != nil {
		t.Errorf("rank 1 left no %s: %v", job.FaultFiredFile, err)
	}
	dir0 := filepath.Join(launch.DeviceDir(jobDir, 0), "ckpt_0")
	bp := filepath.Join(dir0, "CKP-1_4_breakpoint.ckpt")
	if _, err := ckpt.ReadVerified(bp); err != nil {
		t.Fatalf("rank 0's breakpoint: %v", err)
	}
	regular, _ := os.ReadFile(filepath.Join(dir0, "CKP-1_4.ckpt"))
	if raw, _ := os.ReadFile(bp); !bytes.Equal(raw, regular) {
		t.Error("rank 0's breakpoint differs from its checkpoint of step 4")
	}

	second := runStage(t.Context(), jobDir, 2, 2, with)
	if second.err != nil {
		t.Fatalf("attempt 2: %v", second.err)
	}
	log, _ := os.ReadFile(launch.LogPath(jobDir, 1))
	log0, _ := os.ReadFile(launch.LogPath(jobDir, 0))
	if !strings.Contains(string(log0), "held training up") || !strings.Contains(string(log0), "waiting for the previous write") {
		t.Errorf("train.log0 does not sum up the time blocked on saving:\n%s", log0)
	}
	if !strings.Contains(string(log), "not injected again") {
		t.Errorf("train.log1 does not say the fault was skipped:\n%s", log)
	}
	// Rank 1 died with its step-4 write in flight or just after it was
	// committed: the ranks resume from step 4, or from step 2 when that
	// write was torn, but both from the same step.
	from := filepath.Base(workerResult(t, jobDir, 0).ResumedFrom)
	if from != "CKP-1_4.ckpt" && from != "CKP-1_2.ckpt" {
		t.Fatalf("rank 0 resumed from %q, want CKP-1_4.ckpt or CKP-1_2.ckpt", from)
	}
	for rank := 0; rank < 2; rank++ {
		res := workerResult(t, jobDir, rank)
		if filepath.Base(res.ResumedFrom) != from {
			t.Errorf("rank %d resumed from %q, rank 0 from %s", rank, res.ResumedFrom, from)
		}
		if res.PeakSaveStaging <= 0 || res.SaveBlocked <= 0 {
			t.Errorf("rank %d reports staging memory %d and time blocked on saving %v: want both positive", rank, res.PeakSaveStaging, res.SaveBlocked)
		}
		want, got := ckptFiles(t, whole, rank), ckptFiles(t, jobDir, rank)
		if len(want) != 6 || len(got) != len(want) {
			t.Errorf("rank %d: uninterrupted run kept %d files, the resumed one %d; want 3 checkpoints and their sidecars", rank, len(want), len(got))
		}
		for name, data := range want {
			if !bytes.Equal(data, got[name]) {
				t.Errorf("rank %d: %s differs from the uninterrupted synchronous run's", rank, name)
			}
		}
	}
	if got, want := second.outputs["checkpoint"], workerResult(t, jobDir, 0).Checkpoint; got != want || filepath.Base(want) != "CKP-2_5.ckpt" {
		t.Errorf("checkpoint output %v, want the committed CKP-2_5.ckpt (%s)", got, want)
	}
	blocked := 0
	second.mu.Lock()
	for _, e := range second.events {
		if e.Metric != nil && e.Metric.Name == "save_blocked_seconds" && e.Metric.Value > 0 {
			blocked++
		}
	}
	second.mu.Unlock()
	// Attempt 2 saves at 4 (resumed from 2), 6, 8 and 10.
	want := 3
	if from == "CKP-1_2.ckpt" {
		want = 4
	}
	t.Logf("resumed from %s", from)
	if blocked != want {
		t.Errorf("%d save_blocked_seconds metrics, want one per save (%d)", blocked, want)
	}
}

// TestFaultIsValidated refuses a fault outside the job's ranks before
// anything starts, and one after the run's last step on every rank.
func TestFaultIsValidated(t *testing.T) {
	dataDir := synthData(t, 8)
	r := runStage(t.Context(), t.TempDir(), 2, 1, withBlock(dataDir, map[string]any{
		"mode": "data_parallel", "fault": map[string]any{"rank": 2, "step": 1},
	}))
	if r.err == nil || !strings.Contains(r.err.Error(), "/fault: fault at rank 2: the job has ranks 0 to 1") {
		t.Errorf("rank 2 of 2: %v", r.err)
	}
	r = runStage(t.Context(), t.TempDir(), 2, 1, withBlock(dataDir, map[string]any{
		"mode": "data_parallel", "fault": map[string]any{"rank": 1, "step": 6},
	}))
	if r.err == nil || !strings.Contains(r.err.Error(), "fault at step 6: this run has steps 1 to 5") {
		t.Errorf("step 6 of 5: %v", r.err)
	}
}

// TestKillDuringAsyncSaveThroughTheStage kills rank 1 (kind
// kill_during_save: SIGKILL once half of the checkpoint is in its
// temporary file) in the middle of its asynchronous write of step 4's
// checkpoint. The torn write must be left as a temporary file only, shorter
// than a complete checkpoint; every checkpoint any rank left must be
// complete and verify (ckpt.ReadVerified: its sidecar digest); the retried
// stage must resume every rank from step 2, clear the torn file away, and
// end with every rank's checkpoints byte-identical to an uninterrupted
// synchronous run's.
func TestKillDuringAsyncSaveThroughTheStage(t *testing.T) {
	dataDir := synthData(t, 8)
	base := map[string]any{"mode": "data_parallel", "save_checkpoint_steps": 2, "collective_timeout": "20s"}
	whole := t.TempDir()
	mustRun(t, whole, 2, withBlock(dataDir, base))

	extra := map[string]any{"async_save": true, "fault": map[string]any{"rank": 1, "step": 4, "kind": "kill_during_save"}}
	for k, v := range base {
		extra[k] = v
	}
	with := withBlock(dataDir, extra)
	jobDir := t.TempDir()
	if r := runStage(t.Context(), jobDir, 2, 1, with); r.err == nil || !strings.Contains(r.err.Error(), "rank 1") {
		t.Fatalf("attempt 1: %v, want rank 1 failed", r.err)
	}
	dir1 := filepath.Join(launch.DeviceDir(jobDir, 1), "ckpt_1")
	for rank := 0; rank < 2; rank++ {
		dir := filepath.Join(launch.DeviceDir(jobDir, rank), fmt.Sprintf("ckpt_%d", rank))
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		verified := 0
		for _, e := range entries {
			if filepath.Ext(e.Name()) == ".ckpt" && !strings.HasPrefix(e.Name(), ".") {
				if _, err := ckpt.ReadVerified(filepath.Join(dir, e.Name())); err != nil {
					t.Errorf("rank %d left a checkpoint that does not verify: %v", rank, err)
				}
				verified++
			}
		}
		if verified == 0 {
			t.Errorf("rank %d left no checkpoint", rank)
		}
	}
	entries, err := os.ReadDir(dir1)
	if err != nil {
		t.Fatal(err)
	}
	complete, err := os.Stat(filepath.Join(dir1, "CKP-1_2.ckpt"))
	if err != nil {
		t.Fatalf("rank 1's step-2 checkpoint: %v", err)
	}
	var names []string
	var torn []int64
	for _, e := range entries {
		names = append(names, e.Name())
		if e.Name() == "CKP-1_4.ckpt" || e.Name() == "CKP-1_4.ckpt"+ckpt.DigestExt {
			t.Errorf("rank 1's step-4 %s was committed although it was killed writing it", e.Name())
		}
		if strings.HasPrefix(e.Name(), ".CKP-1_4.ckpt.") {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			torn = append(torn, info.Size())
		}
	}
	// Step 4's checkpoint holds the same tensors as step 2's: the same size.
	if len(torn) != 1 || torn[0] <= 0 || torn[0] >= complete.Size() {
		t.Errorf("torn write: temporary files of sizes %v in %v, want one holding part of a %d-byte checkpoint", torn, names, complete.Size())
	}
	t.Logf("rank 1 was killed with %d of %d bytes of CKP-1_4.ckpt written", torn, complete.Size())

	if r := runStage(t.Context(), jobDir, 2, 2, with); r.err != nil {
		t.Fatalf("attempt 2: %v", r.err)
	}
	for rank := 0; rank < 2; rank++ {
		if from := filepath.Base(workerResult(t, jobDir, rank).ResumedFrom); from != "CKP-1_2.ckpt" {
			t.Errorf("rank %d resumed from %q, want CKP-1_2.ckpt", rank, from)
		}
		want, got := ckptFiles(t, whole, rank), ckptFiles(t, jobDir, rank)
		if len(got) != len(want) || len(want) == 0 {
			t.Errorf("rank %d: the uninterrupted run kept %d files, the resumed one %d", rank, len(want), len(got))
		}
		for name, data := range want {
			if !bytes.Equal(data, got[name]) {
				t.Errorf("rank %d: %s differs from the uninterrupted synchronous run's", rank, name)
			}
		}
	}
	entries, err = os.ReadDir(dir1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("the resumed run left %s (the torn write) in rank 1's directory", e.Name())
		}
	}
}
