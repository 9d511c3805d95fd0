package pipeline

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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
