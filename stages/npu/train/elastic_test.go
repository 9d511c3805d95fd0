package train_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/stages/npu/train"
)

// shrinkRecords returns the fields of the shrink records a stage run sent.
func shrinkRecords(r *stageRun) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, e := range r.events {
		if e.Log != nil && e.Log.Fields[train.ShrinkField] == "shrink" {
			out = append(out, e.Log.Fields)
		}
	}
	return out
}

// stepsOf returns the global steps rank reported, in order.
func stepsOf(r *stageRun, rank int) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, e := range r.events {
		if e.Step != nil && e.Step.Rank == rank {
			out = append(out, e.Step.GlobalStep)
		}
	}
	return out
}

// sameTensors fails the test unless a and b hold the same tensors, bit
// for bit.
func sameTensors(t *testing.T, what string, got, want map[string]ckpt.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	for _, name := range sortedNames(want) {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: %s missing", what, name)
		case fmt.Sprint(g.Dims) != fmt.Sprint(want[name].Dims) || !bytes.Equal(g.Data, want[name].Data):
			t.Errorf("%s: %s differs (%v, want %v)", what, name, g.Dims, want[name].Dims)
		}
	}
}

// fieldInt reads an integer field of a shrink record.
func fieldInt(rec map[string]any, key string) int {
	switch v := rec[key].(type) {
	case int:
		return v
	case int64:
		return int(v)
	case float64:
		return int(v)
	}
	return -1
}

// TestShrinkSemiAutoEqualsHandChain trains semi_auto_net on 8 devices in
// semi_auto_parallel (fc.matmul split in two) with on_failure: shrink;
// rank 5 dies at the start of step 6, after the step-4 checkpoint. The
// stage must continue unattended on 4 devices (7 are left; HCCL takes 4,
// and the strategy fits them) with the global batch kept (4 per device),
// and end with exactly the checkpoint of the chain a user writes by hand:
// the same 8-device training failing the same way, ckpt/reshard of its
// step-4 checkpoint to that layout, and npu/train on 4 devices with that
// set as init and init_resumes.
func TestShrinkSemiAutoEqualsHandChain(t *testing.T) {
	dataDir := synthData(t, 16) // 80 images: 5 steps of 16 per epoch
	strategy := map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}
	base := map[string]any{
		"model": "semi_auto_net", "mode": "semi_auto_parallel", "strategy": strategy,
		"batch_size": 2, "epochs": 2, "save_checkpoint_steps": 2, "collective_timeout": "20s",
		"fault": map[string]any{"rank": 5, "step": 6},
	}
	with := func(extra map[string]any) map[string]any {
		w := withBlock(dataDir, base)
		for k, v := range extra {
			if v == nil {
				delete(w, k)
			} else {
				w[k] = v
			}
		}
		return w
	}

	elastic := t.TempDir()
	r := mustRun(t, elastic, 8, with(map[string]any{"on_failure": "shrink"}))
	if got, want := r.outputs["checkpoints"], filepath.Join(elastic, "shrink1"); got != want {
		t.Errorf("checkpoints output %v, want the last job's %s", got, want)
	}
	if r.outputs["global_step"] != 10 {
		t.Errorf("global_step %v, want 10", r.outputs["global_step"])
	}
	if got, want := r.outputs["strategy"], filepath.Join(elastic, "shrink1", "strategy.ckpt"); got != want {
		t.Errorf("strategy output %v, want %s", got, want)
	}
	recs := shrinkRecords(r)
	if len(recs) != 1 {
		t.Fatalf("%d shrink records, want 1: %v", len(recs), r.logs())
	}
	rec := recs[0]
	t.Logf("shrink record: %v", rec)
	for key, want := range map[string]int{"lost_rank": 5, "resumed_step": 4, "from_devices": 8, "to_devices": 4, "shrink": 1} {
		if got := fieldInt(rec, key); got != want {
			t.Errorf("shrink record %s = %v, want %d (%v)", key, rec[key], want, rec)
		}
	}
	if !strings.Contains(fmt.Sprint(rec["to_layout"]), "4 devices, batch 4 per device") {
		t.Errorf("shrink record to_layout %q", rec["to_layout"])
	}
	// Rank 0's curve runs on: the new job's first step is global step 5.
	steps := stepsOf(r, 0)
	if len(steps) == 0 || steps[len(steps)-1] != 10 || !containsRun(steps, 5, 10) {
		t.Errorf("rank 0 reported global steps %v, want them to go on from 5 to 10 after the shrink", steps)
	}

	// The chain by hand.
	hand := t.TempDir()
	failed := runStage(t.Context(), hand, 8, 1, with(nil))
	if failed.err == nil || !strings.Contains(failed.err.Error(), "rank 5") {
		t.Fatalf("the 8-device job without on_failure: err %v, want it to fail naming rank 5", failed.err)
	}
	step4 := filepath.Join(hand, "device0", "ckpt_0", "CKP-1_4.ckpt")
	set := reshardSet(t, map[string]any{
		"from": step4, "devices": 4, "model": "semi_auto_net", "mode": "semi_auto_parallel",
		"strategy": strategy, "batch_size": 4,
	})
	again := t.TempDir()
	mustRun(t, again, 4, with(map[string]any{"batch_size": 4, "init": set, "init_resumes": true, "fault": nil}))
	got, want := lastCheckpoint(t, filepath.Join(elastic, "shrink1"), 0), lastCheckpoint(t, again, 0)
	if filepath.Base(got) != "CKP-2_5.ckpt" || filepath.Base(want) != "CKP-2_5.ckpt" {
		t.Errorf("last checkpoints %s and %s, want both of epoch 2's step 5", got, want)
	}
	sameTensors(t, "after the shrink, against the chain by hand", readTensors(t, got), readTensors(t, want))
}

// TestShrinkAutoParallelEqualsHandChain: an auto_parallel job that loses
// rank 5 goes on on 4 devices with the strategy the search gives for 4,
// its init resharded to exactly that layout (no rank re-cuts a tensor),
// and ends where the chain by hand does: the failed job's step-4 set made
// whole (ckpt/reshard to replicated tensors on 4 devices), then
// auto_parallel on 4 devices from it with init_resumes, whose ranks cut
// their slices out of the whole tensors.
func TestShrinkAutoParallelEqualsHandChain(t *testing.T) {
	shrinkEqualsHandChain(t, "wide_net", "auto_parallel", "semi_auto_parallel")
}

// TestShrinkHybridParallelEqualsHandChain: hybrid_net splits itself over
// the devices of the job; after rank 5 is lost it goes on on 4 devices,
// its init resharded to the layout the model takes on 4 (no re-cut), and
// ends as the chain by hand does (ckpt/reshard of the failed job's step-4
// set for hybrid_parallel on 4 devices, then the training from it).
func TestShrinkHybridParallelEqualsHandChain(t *testing.T) {
	shrinkEqualsHandChain(t, "hybrid_net", "hybrid_parallel", "hybrid_parallel")
}

// shrinkEqualsHandChain trains model in mode on 8 devices with
// on_failure: shrink, rank 5 lost at step 6; the job must go on on 4
// devices from step 4 with no rank re-cutting its init, and end with
// rank 0's (integrated_save: whole) checkpoint of the chain by hand: the
// same job failing, ckpt/reshard of its step-4 checkpoint to 4 devices
// in reshardMode, then the 4-device training from that set with
// init_resumes.
func shrinkEqualsHandChain(t *testing.T, model, mode, reshardMode string) {
	t.Helper()
	dataDir := synthData(t, 16)
	base := withBlock(dataDir, map[string]any{
		"model": model, "mode": mode, "batch_size": 2, "epochs": 2, "save_checkpoint_steps": 2,
		"collective_timeout": "20s", "fault": map[string]any{"rank": 5, "step": 6},
	})
	elastic := t.TempDir()
	r := mustRun(t, elastic, 8, merged(base, map[string]any{"on_failure": "shrink"}))
	recs := shrinkRecords(r)
	if len(recs) != 1 || fieldInt(recs[0], "lost_rank") != 5 || fieldInt(recs[0], "resumed_step") != 4 || fieldInt(recs[0], "to_devices") != 4 {
		t.Fatalf("shrink records %v, want one: rank 5 lost, resumed after step 4 on 4 devices", recs)
	}
	t.Logf("%s shrink: %v → %v", mode, recs[0]["from_layout"], recs[0]["to_layout"])
	if !slices.ContainsFunc(r.logs(), func(l string) bool { return strings.Contains(l, "shrink1") && strings.Contains(l, "no tensor re-cut") }) {
		t.Errorf("the 4-device job re-cut its init: the reshard missed its layout\n%s", strings.Join(r.logs(), "\n"))
	}

	hand := t.TempDir()
	if failed := runStage(t.Context(), hand, 8, 1, base); failed.err == nil {
		t.Fatal("the 8-device job without on_failure succeeded")
	}
	set := reshardSet(t, map[string]any{
		"from": filepath.Join(hand, "device0", "ckpt_0", "CKP-1_4.ckpt"), "devices": 4, "model": model, "mode": reshardMode, "batch_size": 4,
	})
	again := t.TempDir()
	mustRun(t, again, 4, merged(base, map[string]any{"batch_size": 4, "init": set, "init_resumes": true, "fault": nil}))
	got, want := lastCheckpoint(t, filepath.Join(elastic, "shrink1"), 0), lastCheckpoint(t, again, 0)
	if filepath.Base(got) != "CKP-2_5.ckpt" || filepath.Base(want) != "CKP-2_5.ckpt" {
		t.Errorf("last checkpoints %s and %s, want both of epoch 2's step 5", got, want)
	}
	sameTensors(t, "after the shrink, against the chain by hand", readTensors(t, got), readTensors(t, want))
}

// TestShrinkDataParallelEqualsHandChain is the data_parallel case: every
// rank saves its replica, the set of step 4 is resharded (replicated) to
// 4 devices, and the result equals the chain by hand through ckpt/reshard
// of the failed job's directory with devices: 4; and, within float32
// rounding, the training that lost no rank.
func TestShrinkDataParallelEqualsHandChain(t *testing.T) {
	dataDir := synthData(t, 16)
	base := withBlock(dataDir, map[string]any{
		"mode": "data_parallel", "batch_size": 2, "epochs": 2, "save_checkpoint_steps": 2, "collective_timeout": "20s",
		"fault": map[string]any{"rank": 5, "step": 6},
	})
	elastic := t.TempDir()
	r := mustRun(t, elastic, 8, merged(base, map[string]any{"on_failure": "shrink"}))
	recs := shrinkRecords(r)
	if len(recs) != 1 || fieldInt(recs[0], "lost_rank") != 5 || fieldInt(recs[0], "resumed_step") != 4 || fieldInt(recs[0], "to_devices") != 4 {
		t.Fatalf("shrink records %v, want one: rank 5 lost, resumed after step 4 on 4 devices", recs)
	}
	hand := t.TempDir()
	if failed := runStage(t.Context(), hand, 8, 1, base); failed.err == nil {
		t.Fatal("the 8-device job without on_failure succeeded")
	}
	set := reshardSet(t, map[string]any{"from": hand, "devices": 4})
	again := t.TempDir()
	mustRun(t, again, 4, merged(base, map[string]any{"batch_size": 4, "init": set, "init_resumes": true, "fault": nil}))
	for _, rank := range []int{0, 3} {
		got, want := lastCheckpoint(t, filepath.Join(elastic, "shrink1"), rank), lastCheckpoint(t, again, rank)
		if filepath.Base(got) != "CKP-2_5.ckpt" {
			t.Errorf("rank %d's last checkpoint %s, want epoch 2's step 5", rank, got)
		}
		sameTensors(t, fmt.Sprintf("rank %d after the shrink, against the chain by hand", rank), readTensors(t, got), readTensors(t, want))
	}
	// The global batch, the learning rate, the global step and the data
	// position are the lost job's: the result is the uninterrupted 8-device
	// training's within float32 rounding (the gradients are reduced over 4
	// ranks instead of 8).
	whole := t.TempDir()
	mustRun(t, whole, 8, merged(base, map[string]any{"fault": nil}))
	worst := compareTensors(t, readTensors(t, lastCheckpoint(t, filepath.Join(elastic, "shrink1"), 0)), readTensors(t, lastCheckpoint(t, whole, 0)), nil)
	t.Logf("after the shrink against the uninterrupted run: largest relative difference %.3g", worst)
}

// TestShrinkTwice loses a rank of the 8-device job and then one of the
// 4-device job that continues it (a fault keyed by shrink: 1): the stage
// shrinks twice, 8 → 4 → 2 devices, and finishes; its outputs are the
// last job's.
func TestShrinkTwice(t *testing.T) {
	dataDir := synthData(t, 16)
	with := withBlock(dataDir, map[string]any{
		"mode": "data_parallel", "batch_size": 2, "epochs": 2, "save_checkpoint_steps": 2, "collective_timeout": "20s",
		"on_failure": "shrink", "faults": []any{
			map[string]any{"rank": 5, "step": 6},
			map[string]any{"rank": 1, "step": 9, "shrink": 1},
		},
	})
	dir := t.TempDir()
	r := mustRun(t, dir, 8, with)
	recs := shrinkRecords(r)
	checkShrinkRecords(t, recs, []map[string]int{
		{"shrink": 1, "lost_rank": 5, "resumed_step": 4, "from_devices": 8, "to_devices": 4},
		{"shrink": 2, "lost_rank": 1, "resumed_step": 8, "from_devices": 4, "to_devices": 2},
	})
	if got, want := r.outputs["checkpoints"], filepath.Join(dir, "shrink2"); got != want || r.outputs["global_step"] != 10 {
		t.Errorf("outputs checkpoints %v, global_step %v: want %s and 10", got, r.outputs["global_step"], want)
	}
	if got := filepath.Base(lastCheckpoint(t, filepath.Join(dir, "shrink2"), 1)); got != "CKP-2_5.ckpt" {
		t.Errorf("the 2-device job's rank 1 ended with %s, want CKP-2_5.ckpt", got)
	}
}

// TestRetriedElasticStageGoesOnInItsLastJob: an elastic stage whose
// continued job fails too, with max_shrinks spent, is attempted again in
// its directory, as mspipe resume and retry do. The new attempt goes on
// in the 4-device job from that job's newest checkpoint (after global
// step 8), instead of starting over with the 8-device job from its step 4
// and clearing shrink1/, and it ends with the checkpoint of the elastic
// run that lost only the first rank, bit for bit.
func TestRetriedElasticStageGoesOnInItsLastJob(t *testing.T) {
	dataDir := synthData(t, 16)
	base := withBlock(dataDir, map[string]any{
		"mode": "data_parallel", "batch_size": 2, "epochs": 2, "save_checkpoint_steps": 2, "collective_timeout": "20s",
		"on_failure": "shrink", "max_shrinks": 1,
	})
	first := map[string]any{"rank": 5, "step": 6}
	dir := t.TempDir()
	failed := runStage(t.Context(), dir, 8, 1, merged(base, map[string]any{"faults": []any{first, map[string]any{"rank": 1, "step": 9, "shrink": 1}}}))
	if failed.err == nil || !strings.Contains(failed.err.Error(), "rank 1") {
		t.Fatalf("first attempt: err %v, want the 4-device job's failure naming rank 1", failed.err)
	}
	// The device of the second failure is back (its fault is gone); the
	// stage is attempted again.
	again := runStage(t.Context(), dir, 8, 2, merged(base, map[string]any{"faults": []any{first}}))
	if again.err != nil {
		t.Fatalf("second attempt: %v\n%s", again.err, strings.Join(again.logs(), "\n"))
	}
	if steps := stepsOf(again, 0); len(steps) == 0 || steps[0] != 9 || steps[len(steps)-1] != 10 {
		t.Errorf("second attempt: rank 0 reported global steps %v, want 9 to 10 (the 4-device job resumed after its step 8)", steps)
	}
	if recs := shrinkRecords(again); len(recs) != 0 {
		t.Errorf("second attempt sent shrink records %v: the first job ran again", recs)
	}
	if got, want := again.outputs["checkpoints"], filepath.Join(dir, "shrink1"); got != want {
		t.Errorf("checkpoints output %v, want %s", got, want)
	}
	if !slices.ContainsFunc(again.logs(), func(l string) bool { return strings.Contains(l, "continues there from its newest checkpoint") }) {
		t.Errorf("no log line says the attempt continues the shrunk job: %v", again.logs())
	}
	once := t.TempDir()
	mustRun(t, once, 8, merged(base, map[string]any{"fault": first}))
	for _, rank := range []int{0, 3} {
		got, want := lastCheckpoint(t, filepath.Join(dir, "shrink1"), rank), lastCheckpoint(t, filepath.Join(once, "shrink1"), rank)
		if filepath.Base(got) != "CKP-2_5.ckpt" {
			t.Errorf("rank %d's last checkpoint %s, want epoch 2's step 5", rank, got)
		}
		sameTensors(t, fmt.Sprintf("rank %d, retried, against the run that lost one rank", rank), readTensors(t, got), readTensors(t, want))
	}

	// A damaged record of the shrink is an error naming it, not a guess.
	record := filepath.Join(dir, "shrink1", "job.json")
	if err := os.WriteFile(record, []byte(`{"devices": 9, "batch_size": 4, "resumed_step": 4}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := runStage(t.Context(), dir, 8, 3, merged(base, map[string]any{"faults": []any{first}}))
	if bad.err == nil || !strings.Contains(bad.err.Error(), record) || !strings.Contains(bad.err.Error(), "devices 9") {
		t.Errorf("a shrink record of 9 devices: err %v, want one naming %s", bad.err, record)
	}
}

// TestMaxShrinksZeroFailsAsBefore: max_shrinks: 0 fails as on_failure:
// fail does, naming the rank, and starts no other job.
func TestMaxShrinksZeroFailsAsBefore(t *testing.T) {
	dataDir := synthData(t, 16)
	dir := t.TempDir()
	r := runStage(t.Context(), dir, 4, 1, withBlock(dataDir, map[string]any{
		"mode": "data_parallel", "save_checkpoint_steps": 2, "collective_timeout": "20s",
		"on_failure": "shrink", "max_shrinks": 0, "fault": map[string]any{"rank": 2, "step": 4},
	}))
	if r.err == nil || !errors.Is(r.err, launch.ErrRankFailed) || !strings.Contains(r.err.Error(), "rank 2") {
		t.Fatalf("err %v, want the job's failure naming rank 2", r.err)
	}
	if _, err := os.Stat(filepath.Join(dir, "shrink1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("shrink1/ exists (%v): max_shrinks 0 must not continue", err)
	}
	if recs := shrinkRecords(r); len(recs) != 0 {
		t.Errorf("shrink records %v", recs)
	}
}

// TestShrinkRefusedWhereItCannotWork: on_failure: shrink is refused
// before anything runs with the launchers that place ranks on other
// servers, with pipeline stages and in the modes not done yet; max_shrinks
// and a fault of a later job need on_failure: shrink.
func TestShrinkRefusedWhereItCannotWork(t *testing.T) {
	dataDir := synthData(t, 16)
	for _, tc := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"mode": "data_parallel", "on_failure": "shrink", "launcher": "mpirun"}, "/on_failure: on_failure: shrink runs with the local launcher only, not mpirun"},
		{map[string]any{"mode": "semi_auto_parallel", "on_failure": "shrink", "pipeline_stages": 4, "micro_size": 4}, "/on_failure: on_failure: shrink keeps the 4 pipeline stages, and no smaller job of 4 devices can"},
		{map[string]any{"mode": "stand_alone", "on_failure": "shrink"}, "is for the modes of several devices (data_parallel, semi_auto_parallel, auto_parallel, hybrid_parallel), not stand_alone"},
		{map[string]any{"mode": "data_parallel", "max_shrinks": 2}, "/max_shrinks: max_shrinks is for on_failure: shrink"},
		{map[string]any{"mode": "data_parallel", "fault": map[string]any{"rank": 1, "step": 2, "shrink": 1}}, "needs on_failure: shrink"},
		{map[string]any{"mode": "data_parallel", "on_failure": "shrink", "faults": []any{map[string]any{"rank": 1, "step": 2}, map[string]any{"rank": 0, "step": 3}}}, "/faults/1: a second fault in job 0"},
	} {
		r := runStage(t.Context(), t.TempDir(), 4, 1, withBlock(dataDir, tc.extra))
		if r.err == nil || !strings.Contains(r.err.Error(), tc.want) {
			t.Errorf("%v: err %v, want it to say %q", tc.extra, r.err, tc.want)
		}
	}
}

// merged returns base with extra's entries set (nil: removed).
func merged(base, extra map[string]any) map[string]any {
	w := map[string]any{}
	for k, v := range base {
		w[k] = v
	}
	for k, v := range extra {
		if v == nil {
			delete(w, k)
		} else {
			w[k] = v
		}
	}
	return w
}

// containsRun reports whether steps holds lo, lo+1, …, hi in order.
func containsRun(steps []int64, lo, hi int64) bool {
	next := lo
	for _, s := range steps {
		if s == next {
			next++
		}
	}
	return next > hi
}

// checkShrinkRecords fails the test unless recs are one shrink record per
// entry of want, each with want's fields.
func checkShrinkRecords(t *testing.T, recs []map[string]any, want []map[string]int) {
	t.Helper()
	if len(recs) != len(want) {
		t.Fatalf("%d shrink records, want %d: %v", len(recs), len(want), recs)
	}
	for i, w := range want {
		for key, v := range w {
			if got := fieldInt(recs[i], key); got != v {
				t.Errorf("shrink record %d: %s = %v, want %d", i+1, key, recs[i][key], v)
			}
		}
	}
}
