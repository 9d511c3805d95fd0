package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/spec"
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

// TestPlanSaysThePluginChanged: after a run, a new build of the plugin
// (another identity, every input the same) makes plan say that this is why
// the stage runs again, naming the earlier run and both identities; a
// stage whose inputs changed too keeps the plain reason.
func TestPlanSaysThePluginChanged(t *testing.T) {
	w := newWorkspace(t)
	const src = "version: 1\nname: p\nstages:\n  a: {uses: work, with: {x: 1}}\n  b: {uses: files}\n"
	l := &scriptLauncher{}
	l.ident = func(s *spec.Stage) string { return s.Uses + "@1 sha256:" + strings.Repeat("a", 64) }
	first := w.mustRun(w.engine(l), src)
	if got := first.Stages["a"].Plugin; got != "work@1 sha256:"+strings.Repeat("a", 64) {
		t.Errorf("run.json records plugin %q for stage a", got)
	}
	l.ident = func(s *spec.Stage) string {
		if s.Uses == "work" {
			return "work@1 mspipe revision " + strings.Repeat("b", 40) + " build " + strings.Repeat("c", 64)
		}
		return s.Uses + "@1 sha256:" + strings.Repeat("a", 64)
	}
	plan, err := w.engine(l).Plan(context.Background(), w.load(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "the plugin changed since run " + first.ID + ", which had these inputs: work@1 sha256:aaaaaaaaaaaa… then, work@1 mspipe revision bbbbbbbbbbbb… build cccccccccccc… now"
	if plan[0].Action != "run" || plan[0].Detail != want {
		t.Errorf("stage a: %s, %q\nwant run, %q", plan[0].Action, plan[0].Detail, want)
	}
	if plan[1].Action != "cached" {
		t.Errorf("stage b, whose plugin did not change: %s %q", plan[1].Action, plan[1].Detail)
	}
	changed := strings.Replace(src, "x: 1", "x: 2", 1)
	plan, err = w.engine(l).Plan(context.Background(), w.load(changed), nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan[0].Detail != "no earlier run has these inputs" {
		t.Errorf("stage a with another input and plugin: %q", plan[0].Detail)
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
