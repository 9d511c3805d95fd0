package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestPlanShowsWhatWouldRun: before any run every stage would run; after
// a run the plan shows the cached stage and its source, the stage skipped
// by a false `if` and what needs it, without running anything.
func TestPlanShowsWhatWouldRun(t *testing.T) {
	w := newWorkspace(t)
	const src = `version: 1
name: plan
params:
  go: {type: bool, default: false}
stages:
  a: {uses: work}
  b: {uses: work, if: "${{ params.go }}"}
  c: {uses: work, needs: b}
  d: {uses: work, needs: a}
`
	l := &scriptLauncher{}
	p := w.load(src)
	params := map[string]any{"go": false}
	show := func(plan []PlannedStage) string {
		s := ""
		for _, ps := range plan {
			s += fmt.Sprintf("%s:%s ", ps.ID, ps.Action)
		}
		return s
	}
	before, err := w.engine(l).Plan(context.Background(), p, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(before); got != "a:run b:skip c:skip d:run " {
		t.Errorf("plan before a run: %s", got)
	}
	first := w.mustRun(w.engine(l), src)
	after, err := w.engine(l).Plan(context.Background(), p, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(after); got != "a:cached b:skip c:skip d:cached " {
		t.Errorf("plan after a run: %s", got)
	}
	if after[0].Detail != "outputs of run "+first.ID || after[2].Detail != "needs stage b, which would be skipped" {
		t.Errorf("details: %q, %q", after[0].Detail, after[2].Detail)
	}
	if n := len(l.ran()); n != 2 {
		t.Errorf("%d stages ran, want 2 (plan runs nothing)", n)
	}
	e := w.engine(l)
	e.NoCache = true
	nocache, err := e.Plan(context.Background(), p, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(nocache); got != "a:run b:skip c:skip d:run " {
		t.Errorf("plan without cache: %s", got)
	}
}

// TestPlanSaysWhyTheCacheWasRefused: when an earlier run had the same
// inputs but its output was changed since, plan says so rather than "no
// earlier run has these inputs".
func TestPlanSaysWhyTheCacheWasRefused(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: filesRun(map[string]string{"a": "good"})}
	const src = "version: 1\nname: t\nstages:\n  a: {uses: files}\n"
	first := w.mustRun(w.engine(l), src)
	dir := first.Stages["a"].Outputs["dir"].(string)
	if err := os.WriteFile(filepath.Join(dir, "out.txt"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := w.engine(l).Plan(context.Background(), w.load(src), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	want := "run " + first.ID + " had these inputs, but its output dir (" + dir + ") changed since the stage produced it"
	if len(plan) != 1 || plan[0].Action != "run" || plan[0].Detail != want {
		t.Errorf("plan %+v, want run: %s", plan, want)
	}
}
