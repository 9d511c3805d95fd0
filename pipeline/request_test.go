package pipeline

import (
	"context"
	"errors"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

// A failed stage is never served from the cache, although its cache key
// was recorded before it ran: the next run with the same inputs runs it.
func TestFailedStageIsNotCached(t *testing.T) {
	w := newWorkspace(t)
	fail := true
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		if fail {
			return nil, errors.New("boom")
		}
		return map[string]any{"n": 1}, nil
	}}
	src := "version: 1\nname: p\nstages:\n  a: {uses: work}\n"
	st, err := w.run(w.engine(l), src)
	if err == nil || st.Stages["a"].Status != StatusFailed || st.Stages["a"].CacheKey == "" {
		t.Fatalf("first run: %v, stage %+v; want a failure with its cache key recorded", err, st.Stages["a"])
	}
	fail = false
	st = w.mustRun(w.engine(l), src)
	if got := st.Stages["a"].Status; got != StatusSucceeded {
		t.Errorf("second run: a is %s, want succeeded (a failed stage's outputs are not a cache hit)", got)
	}
	if n := len(l.ran()); n != 2 {
		t.Errorf("the plugin ran %d times, want 2", n)
	}
}

// What the plugin receives: the pipeline's env overridden by the stage's,
// the work directory, the attempt and the stage's cluster.
func TestRunRequestCarriesEnvAndCluster(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		return map[string]any{"n": 1}, nil
	}}
	st := w.mustRun(w.engine(l), `version: 1
name: p
env: {A: pipeline, B: pipeline}
cluster: {devices: 4}
stages:
  a:
    uses: work
    env: {B: stage, C: stage}
`)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) != 1 {
		t.Fatalf("%d calls", len(l.calls))
	}
	req := l.calls[0].req
	want := map[string]string{"A": "pipeline", "B": "stage", "C": "stage"}
	if len(req.Env) != len(want) {
		t.Errorf("env %v, want %v", req.Env, want)
	}
	for k, v := range want {
		if req.Env[k] != v {
			t.Errorf("env %s = %q, want %q (all: %v)", k, req.Env[k], v, req.Env)
		}
	}
	if req.Cluster.Devices != 4 || req.Attempt != 1 || req.StageID != "a" || req.RunID != st.ID || req.WorkDir == "" {
		t.Errorf("request %+v", req)
	}
}
