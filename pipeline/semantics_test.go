package pipeline

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
)

// TestEnvReadsTheSpecsEnv: env.NAME is the stage's env over the
// pipeline's over the process's.
func TestEnvReadsTheSpecsEnv(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{}
	e := w.engine(l)
	e.Env = map[string]string{"A": "proc", "B": "proc", "C": "proc"}
	w.mustRun(e, `version: 1
name: env
env: {A: top, B: top}
stages:
  s: {uses: work, env: {A: stage}, with: {v: "${{ env.A }}-${{ env.B }}-${{ env.C }}"}}
  t: {uses: work, with: {v: "${{ env.A }}"}}
`)
	got := map[string]any{}
	for _, c := range l.calls {
		got[c.stage] = c.req.With["v"]
	}
	if got["s"] != "stage-top-proc" || got["t"] != "top" {
		t.Errorf("with.v = %v, want s: stage-top-proc, t: top", got)
	}
}

// TestRelativePathOutputIsTheWorkDirs: a path output a stage reports
// relatively is recorded against the stage's work directory.
func TestRelativePathOutputIsTheWorkDirs(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		w.write(filepath.Join("runs", c.req.RunID, "stages", c.stage, "out.txt"), "made by "+c.stage)
		return map[string]any{"dir": "out.txt"}, nil
	}}
	st := w.mustRun(w.engine(l), `version: 1
name: out
stages:
  f: {uses: files}
`)
	want := filepath.Join(w.dir, "runs", st.ID, "stages", "f", "out.txt")
	if got := st.Stages["f"].Outputs["dir"]; got != want {
		t.Errorf("output dir = %v, want %s", got, want)
	}
	if st.Stages["f"].Artifacts["dir"] == "" {
		t.Errorf("no content hash of the output")
	}
}

// outcomeSpec has a stage a, a cleanup for its failure, a stage that needs
// it plainly, one that runs always after that one, and one that reads a's
// status.
const outcomeSpec = `version: 1
name: outcomes
params:
  fail: {type: bool, default: false}
stages:
  a: {uses: work, with: {fail: "${{ params.fail }}"}}
  cleanup: {uses: work, needs: [a], if: failure()}
  after: {uses: work, needs: [a]}
  report: {uses: work, needs: [after], if: "${{ always() }}"}
  ok: {uses: work, needs: [a], if: "success() && stages.a.status == 'succeeded'"}
`

func TestConditionsOnOutcomes(t *testing.T) {
	failA := func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		if c.req.With["fail"] == true {
			return nil, errors.New("a broke")
		}
		return map[string]any{"n": 1}, nil
	}
	w := newWorkspace(t)
	e := w.engine(&scriptLauncher{run: failA})
	e.NoCache = true
	p := w.load(outcomeSpec)
	st, err := e.Run(context.Background(), p, []byte(outcomeSpec), map[string]any{"fail": true})
	if !errors.Is(err, ErrStageFailed) {
		t.Fatalf("run with a failing: %v, want a failed stage", err)
	}
	want := map[string]Status{"a": StatusFailed, "cleanup": StatusSucceeded, "after": StatusPending, "report": StatusSucceeded, "ok": StatusSkipped}
	if got := statuses(st); !reflect.DeepEqual(got, want) {
		t.Errorf("after a failure: %v, want %v", got, want)
	}
	if st.Status != StatusFailed || !strings.Contains(st.Stages["after"].Reason, "not run: stage a failed") {
		t.Errorf("run %s, after's reason %q", st.Status, st.Stages["after"].Reason)
	}

	st = w.mustRun(e, outcomeSpec)
	want = map[string]Status{"a": StatusSucceeded, "cleanup": StatusSkipped, "after": StatusSucceeded, "report": StatusSucceeded, "ok": StatusSucceeded}
	if got := statuses(st); !reflect.DeepEqual(got, want) {
		t.Errorf("after a success: %v, want %v", got, want)
	}

	// From the cache, a's status still reads succeeded.
	e.NoCache = false
	w.mustRun(e, outcomeSpec)
	st = w.mustRun(e, outcomeSpec)
	want = map[string]Status{"a": StatusCached, "cleanup": StatusSkipped, "after": StatusCached, "report": StatusCached, "ok": StatusCached}
	if got := statuses(st); !reflect.DeepEqual(got, want) {
		t.Errorf("cached rerun: %v, want %v", got, want)
	}
}

// TestStatusFunctionsOnlyInIf: success() and the others are refused
// outside a stage's if.
func TestStatusFunctionsOnlyInIf(t *testing.T) {
	w := newWorkspace(t)
	path := w.write("pipeline.yaml", `version: 1
name: misuse
stages:
  a: {uses: work, with: {v: "${{ failure() }}"}}
`)
	p, errs, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	errs = append(errs, spec.Validate(p, testCatalog{}, spec.Options{})...)
	if len(errs) != 1 || errs[0].Where() != path+":4:34" || !strings.Contains(errs[0].Message, "failure() is a condition on the outcome") {
		t.Fatalf("got %v", errs)
	}
}

const interruptSpec = `version: 1
name: interrupted
stages:
  a: {uses: work}
  always: {uses: work, needs: [a], if: always()}
  cancelled: {uses: work, needs: [a], if: cancelled()}
  plain: {uses: work, needs: [a]}
  failed: {uses: work, needs: [a], if: failure()}
  succeeded: {uses: work, needs: [a], if: success()}
  last: {uses: work, needs: [plain, always], if: "${{ always() }}"}
`

// TestInterruptRunsCleanupStages: as in GitHub Actions after a workflow is
// cancelled, the running stage is cancelled, the stages whose if is true
// with cancelled() still run with a live context (also one that needs a
// stage that will never run now), and the others stay pending for resume.
func TestInterruptRunsCleanupStages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	liveCtx := map[string]bool{}
	run := func(sctx context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		if c.stage == "a" {
			cancel() // Ctrl-C while a runs
			<-sctx.Done()
			return nil, sctx.Err()
		}
		mu.Lock()
		liveCtx[c.stage] = sctx.Err() == nil
		mu.Unlock()
		return map[string]any{"n": 1}, nil
	}
	w := newWorkspace(t)
	e := w.engine(&scriptLauncher{run: run})
	e.NoCache = true
	p := w.load(interruptSpec)
	st, err := e.Run(ctx, p, []byte(interruptSpec), nil)
	if !errors.Is(err, context.Canceled) || st.Status != StatusCancelled {
		t.Fatalf("err %v, run %s; want the run cancelled", err, st.Status)
	}
	want := map[string]Status{"a": StatusCancelled, "always": StatusSucceeded, "cancelled": StatusSucceeded,
		"plain": StatusPending, "failed": StatusPending, "succeeded": StatusPending, "last": StatusSucceeded}
	if got := statuses(st); !reflect.DeepEqual(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
	wantLive := map[string]bool{"always": true, "cancelled": true, "last": true}
	if !reflect.DeepEqual(liveCtx, wantLive) {
		t.Errorf("stages run after the interrupt, with a live context: %v, want %v", liveCtx, wantLive)
	}
	for _, sid := range []string{"plain", "failed", "succeeded"} {
		if r := st.Stages[sid].Reason; r != "not run: interrupted" {
			t.Errorf("%s: reason %q, want not run: interrupted", sid, r)
		}
	}
}

// TestForceStopEndsCleanupStages: a second interrupt (the force-stop
// context) cancels the stages that run after the first.
func TestForceStopEndsCleanupStages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	force, forceStop := context.WithCancel(context.Background())
	defer forceStop()
	run := func(sctx context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		switch c.stage {
		case "a":
			cancel()
		case "always":
			forceStop() // Ctrl-C again while the cleanup stage runs
		default:
			return map[string]any{"n": 1}, nil
		}
		<-sctx.Done()
		return nil, sctx.Err()
	}
	const src = "version: 1\nname: force\nstages:\n  a: {uses: work}\n  always: {uses: work, needs: [a], if: always()}\n"
	w := newWorkspace(t)
	e := w.engine(&scriptLauncher{run: run})
	p := w.load(src)
	done := make(chan struct{})
	var st *RunState
	go func() {
		st, _ = e.Run(WithForceStop(ctx, force), p, []byte(src), nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the force stop")
	}
	if got := statuses(st); got["a"] != StatusCancelled || got["always"] != StatusCancelled {
		t.Errorf("statuses %v, want a and always cancelled", got)
	}
}
