package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
	"github.com/rs/zerolog"
)

// TestStateTransitions: run.json moves each stage from pending through
// running to its end: while a runs, run.json says a running and b, c
// pending; b (if false) is skipped and c, which needs b, is skipped too;
// d fails; e needs d and stays pending; a second run caches a.
func TestStateTransitions(t *testing.T) {
	w := newWorkspace(t)
	const src = `version: 1
name: states
stages:
  a: {uses: work}
  b: {uses: work, needs: a, if: "${{ stages.a.outputs.n > 5 }}"}
  c: {uses: work, needs: b}
  d: {uses: work, needs: a}
  e: {uses: work, needs: d}
`
	seen := map[string]map[string]Status{}
	var mu sync.Mutex
	l := &scriptLauncher{}
	l.run = func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		runs, _ := w.store.List()
		mu.Lock()
		seen[c.stage] = runs[0].StatusMap()
		mu.Unlock()
		if c.stage == "d" {
			return nil, errors.New("d broke")
		}
		return map[string]any{"n": 1}, nil
	}
	e := w.engine(l)
	e.Jobs = 1
	st, err := w.run(e, src)
	if !errors.Is(err, ErrStageFailed) {
		t.Fatalf("err = %v", err)
	}
	if got := seen["a"]; got["a"] != StatusRunning || got["b"] != StatusPending || got["e"] != StatusPending {
		t.Errorf("run.json while a runs: %v", got)
	}
	if got := seen["d"]; got["a"] != StatusSucceeded || got["d"] != StatusRunning || got["b"] != StatusSkipped {
		t.Errorf("run.json while d runs: %v", got)
	}
	want := map[string]Status{"a": StatusSucceeded, "b": StatusSkipped, "c": StatusSkipped, "d": StatusFailed, "e": StatusPending}
	saved, err := LoadState(filepath.Join(w.store.Dir, st.ID))
	if err != nil {
		t.Fatal(err)
	}
	for id, s := range want {
		if st.Stages[id].Status != s || saved.Stages[id].Status != s {
			t.Errorf("%s: %s (run.json %s), want %s", id, st.Stages[id].Status, saved.Stages[id].Status, s)
		}
	}
	reasons := map[string]string{
		"b": `if "${{ stages.a.outputs.n > 5 }}" was false`,
		"c": "needs stage b, which was skipped",
		"d": "d broke",
		"e": "not run: stage d failed",
	}
	for id, r := range reasons {
		if got := saved.Stages[id].Reason; got != r {
			t.Errorf("%s: reason %q, want %q", id, got, r)
		}
	}
	if saved.Status != StatusFailed || saved.Error != "stage d failed: d broke" || saved.Finished == nil {
		t.Errorf("run: %s %q finished %v", saved.Status, saved.Error, saved.Finished)
	}
	if fmtRan := strings.Join(l.ran(), ","); fmtRan != "a,d" {
		t.Errorf("ran %s, want a,d", fmtRan)
	}
	if l.closed != 2 {
		t.Errorf("%d plugins closed, want 2", l.closed)
	}
}

// TestResumeRunsFailedStagesAndDependents: resume re-runs the failed stage
// and what depends on it, keeps the others' outputs, and counts attempts
// across both runs; a run that succeeded has nothing to resume.
func TestResumeRunsFailedStagesAndDependents(t *testing.T) {
	w := newWorkspace(t)
	const src = `version: 1
name: resume
stages:
  a: {uses: work}
  b: {uses: work, needs: a}
  c: {uses: work, needs: b, with: {from: "${{ stages.b.outputs.n }}"}}
  d: {uses: work, needs: a}
`
	broken := true
	l := &scriptLauncher{run: func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		if c.stage == "b" && broken {
			return nil, errors.New("b broke")
		}
		return map[string]any{"n": 7}, nil
	}}
	first, err := w.run(w.engine(l), src)
	if !errors.Is(err, ErrStageFailed) {
		t.Fatalf("first run: %v", err)
	}
	broken = false
	l.calls = nil
	p, final, err := w.engine(l).Resume(context.Background(), first.ID)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if p == nil || final.ID != first.ID || final.Status != StatusSucceeded {
		t.Fatalf("resume: %v %+v", p, final)
	}
	if got := strings.Join(l.ran(), ","); got != "b,c" {
		t.Errorf("resume ran %s, want b,c", got)
	}
	if final.Stages["b"].Attempts != 2 || final.Stages["c"].With["from"] != 7 {
		t.Errorf("b attempts %d, c with %v", final.Stages["b"].Attempts, final.Stages["c"].With)
	}
	_, again, err := w.engine(l).Resume(context.Background(), first.ID)
	if !errors.Is(err, ErrNothingToResume) || again.Status != StatusSucceeded {
		t.Errorf("second resume: %v", err)
	}
}

// TestResumeRefusesWhatItCannotTrust: an unknown run, and a run whose
// pipeline.yaml no longer matches its run.json, are errors.
func TestResumeRefusesWhatItCannotTrust(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		return nil, errors.New("no")
	}}
	st, _ := w.run(w.engine(l), "version: 1\nname: r\nstages:\n  a: {uses: work}\n")
	if _, _, err := w.engine(l).Resume(context.Background(), "20990101-000000-abcdef"); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	dir := filepath.Join(w.store.Dir, st.ID)
	if err := os.WriteFile(filepath.Join(dir, "pipeline.yaml"), []byte("version: 1\nname: r\nstages:\n  a: {uses: work}\n  b: {uses: work}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.engine(l).Resume(context.Background(), st.ID); !errors.Is(err, ErrCorruptState) {
		t.Errorf("changed spec: %v, want ErrCorruptState", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pipeline.yaml"), []byte("version: 1\nname: r\nstages:\n  a: {uses: nothing}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.engine(l).Resume(context.Background(), st.ID); err == nil || !strings.Contains(err.Error(), "no longer validates") {
		t.Errorf("invalid spec: %v", err)
	}
}

// TestFailedSaveStopsTheRun: when run.json cannot be written mid-run, the
// running stage finishes, no new stage starts, and Run returns the save
// error (not a stage failure).
func TestFailedSaveStopsTheRun(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{}
	l.run = func(_ context.Context, c call, _ func(plugins.Event)) (map[string]any, error) {
		// A directory where run.json should be: every later save fails.
		runs, _ := os.ReadDir(w.store.Dir)
		state := filepath.Join(w.store.Dir, runs[0].Name(), "run.json")
		if err := os.Remove(state); err != nil {
			t.Error(err)
		}
		if err := os.MkdirAll(filepath.Join(state, "blocked"), 0o755); err != nil {
			t.Error(err)
		}
		return map[string]any{"n": 1}, nil
	}
	var log bytes.Buffer
	e := w.engine(l)
	e.Log = zerolog.New(&log)
	st, err := w.run(e, "version: 1\nname: s\nstages:\n  a: {uses: work}\n  b: {uses: work, needs: a}\n")
	if err == nil || errors.Is(err, ErrStageFailed) || !strings.Contains(err.Error(), "save run state") {
		t.Fatalf("err = %v, want the save error", err)
	}
	if got := strings.Join(l.ran(), ","); got != "a" {
		t.Errorf("ran %s, want only a", got)
	}
	if st.Status != StatusFailed || st.Stages["a"].Status != StatusSucceeded || st.Stages["b"].Status != StatusPending {
		t.Errorf("run %s, a %s, b %s", st.Status, st.Stages["a"].Status, st.Stages["b"].Status)
	}
	if !strings.Contains(log.String(), `"event":"state_not_saved"`) {
		t.Errorf("no state_not_saved event in %s", log.String())
	}
}

// TestRunStartFailsWithoutRunDirectory: a store that cannot hold a run
// directory fails Run before any stage.
func TestRunStartFailsWithoutRunDirectory(t *testing.T) {
	w := newWorkspace(t)
	w.write("runs", "a file, not a directory")
	l := &scriptLauncher{}
	p := w.load("version: 1\nname: s\nstages:\n  a: {uses: work}\n")
	if _, err := w.engine(l).Run(context.Background(), p, nil, nil); err == nil || !strings.Contains(err.Error(), "create run directory") {
		t.Errorf("err = %v", err)
	}
}

// TestLogEvents: the engine's logger gets one event per transition whose
// message is the console line and whose fields name the event and stage;
// plugin log records at info and above are console lines, debug records
// and progress come at debug level.
func TestLogEvents(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(_ context.Context, c call, emit func(plugins.Event)) (map[string]any, error) {
		now := time.Now()
		emit(plugins.Event{Time: now, Log: &plugins.LogEvent{Level: plugins.LevelInfo, Message: "epoch 1", Fields: map[string]any{"loss": 2.5, "stream": "stdout"}}})
		emit(plugins.Event{Time: now, Log: &plugins.LogEvent{Level: plugins.LevelInfo, Message: "shrink 1: rank 5 lost", Fields: map[string]any{plugins.RecordField: "shrink", "lost_rank": 5}}})
		emit(plugins.Event{Time: now, Log: &plugins.LogEvent{Level: plugins.LevelDebug, Message: "detail"}})
		emit(plugins.Event{Time: now, Progress: &plugins.ProgressEvent{Done: 1, Total: 2, Unit: "steps", Message: "step 1"}})
		emit(plugins.Event{Time: now, Metric: &plugins.MetricEvent{Name: "loss", Value: 2.5, Step: 1}})
		emit(plugins.Event{Time: now, Artifact: &plugins.ArtifactEvent{Name: "ckpt", Path: "x.ckpt", SHA256: "ab"}})
		emit(plugins.Event{Time: now, Step: &plugins.StepEvent{Rank: 0, Epoch: 1, Step: 2, GlobalStep: 2, TotalSteps: 4, Loss: 2.25}})
		emit(plugins.Event{Time: now, Step: &plugins.StepEvent{Rank: 1, Epoch: 1, Step: 2, GlobalStep: 2, TotalSteps: 4, Loss: 2.25}})
		return map[string]any{"n": 1}, nil
	}}
	var out bytes.Buffer
	e := w.engine(l)
	e.Log = zerolog.New(&out)
	pv := &progressRecorder{}
	e.Progress = pv
	st := w.mustRun(e, "version: 1\nname: logs\nstages:\n  a: {uses: work}\n")
	type event struct {
		Level, Event, Stage, Run, Message string
	}
	var got []event
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if ev.Run != st.ID {
			t.Errorf("event %q has run %q", ev.Message, ev.Run)
		}
		got = append(got, ev)
	}
	dir := filepath.Join(w.store.Dir, st.ID)
	want := []event{
		{"info", "run_started", "", st.ID, "run " + st.ID + " of logs (" + dir + ")"},
		{"info", "stage_started", "a", st.ID, "[a] started (work)"},
		{"info", "log", "a", st.ID, "[a] epoch 1 loss=2.5"},
		{"info", "log", "a", st.ID, "[a] shrink 1: rank 5 lost"}, // a record: its sentence alone
		{"debug", "log", "a", st.ID, "[a] detail"},
		{"debug", "progress", "a", st.ID, "[a] step 1"},
		{"debug", "metric", "a", st.ID, "[a] loss=2.5"},
		{"debug", "artifact", "a", st.ID, "[a] artifact ckpt: x.ckpt"},
		{"debug", "step", "a", st.ID, "[a] rank 0 epoch 1 step 2 loss 2.25"},
		{"debug", "step", "a", st.ID, "[a] rank 1 epoch 1 step 2 loss 2.25"},
		{"info", "stage_succeeded", "a", st.ID, "[a] succeeded in 0s"},
	}
	if len(got) != len(want)+1 {
		t.Fatalf("%d events, want %d:\n%s", len(got), len(want)+1, out.String())
	}
	for i, ev := range want {
		if strings.HasPrefix(ev.Message, "[a] succeeded in") {
			if !strings.HasPrefix(got[i].Message, "[a] succeeded in ") {
				t.Errorf("event %d: %+v, want %+v", i, got[i], ev)
			}
			continue
		}
		if got[i] != ev {
			t.Errorf("event %d: %+v, want %+v", i, got[i], ev)
		}
	}
	if last := got[len(got)-1]; last.Event != "run_finished" || !strings.HasPrefix(last.Message, "run "+st.ID+" succeeded in ") || !strings.HasSuffix(last.Message, ": 1 succeeded") {
		t.Errorf("last event %+v", last)
	}
	// The progress event and rank 0's step; rank 1's step, after rank 0's,
	// is not progress.
	if pv.progress != 2 || pv.ended["a"] != StatusSucceeded {
		t.Errorf("progress view: %d progress, ended %v; want 2 and succeeded", pv.progress, pv.ended)
	}
	events, err := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"run_started", "stage_started", `"event":"log"`, `"record":"shrink"`, `"lost_rank":5`, "progress", "metric", "artifact", `"event":"step"`, "stage_succeeded", "run_finished"} {
		if !bytes.Contains(events, []byte(e)) {
			t.Errorf("events.jsonl lacks %s", e)
		}
	}
	stageLog, err := os.ReadFile(filepath.Join(dir, "stages", "a", "stage.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(stageLog, []byte("INFO epoch 1 loss=2.5\n")) || !bytes.Contains(stageLog, []byte("--- attempt 1 started")) {
		t.Errorf("stage.log:\n%s", stageLog)
	}
}

type progressRecorder struct {
	mu       sync.Mutex
	progress int
	ended    map[string]Status
}

func (p *progressRecorder) Progress(string, plugins.ProgressEvent) {
	p.mu.Lock()
	p.progress++
	p.mu.Unlock()
}

func (p *progressRecorder) Ended(stage string, s Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended == nil {
		p.ended = map[string]Status{}
	}
	p.ended[stage] = s
}

// TestGraph: the order keeps file order among independent stages,
// Downstream is transitive, and a cycle (which validation rejects) is an
// error rather than a loop.
func TestGraph(t *testing.T) {
	p := &spec.Pipeline{Name: "g", Stages: []*spec.Stage{
		{ID: "c", Uses: "work", Needs: []string{"a"}},
		{ID: "a", Uses: "work"},
		{ID: "b", Uses: "work"},
		{ID: "d", Uses: "work", Needs: []string{"c", "b"}},
	}}
	g, err := NewGraph(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(g.Order, ","); got != "a,c,b,d" {
		t.Errorf("order %s, want a,c,b,d", got)
	}
	down := g.Downstream("a")
	if len(down) != 2 || !down["c"] || !down["d"] {
		t.Errorf("downstream of a: %v", down)
	}
	cyc := &spec.Pipeline{Stages: []*spec.Stage{{ID: "x", Needs: []string{"y"}}, {ID: "y", Needs: []string{"x"}}}}
	if _, err := NewGraph(cyc); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("cycle: %v", err)
	}
	e := &Engine{Store: &Store{Dir: t.TempDir()}, Catalog: testCatalog{}, Launcher: &scriptLauncher{}}
	if _, err := e.Run(context.Background(), cyc, nil, nil); err == nil {
		t.Error("Run of a cyclic pipeline succeeded")
	}
}

// TestGraphDrawings: Mermaid and dot show every stage, edge and status,
// with conditional edges marked.
func TestGraphDrawings(t *testing.T) {
	p := &spec.Pipeline{Name: "g", Stages: []*spec.Stage{
		{ID: "a", Uses: "work"},
		{ID: "b", Uses: "files", Needs: []string{"a"}, If: &spec.Template{Raw: "x"}},
	}}
	g, err := NewGraph(p)
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]Status{"a": StatusSucceeded}
	var m, d bytes.Buffer
	if err := g.WriteMermaid(&m, p, status); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteDot(&d, p, status); err != nil {
		t.Fatal(err)
	}
	wantM := "flowchart TD\n  a[\"a<br/><small>work</small><br/><i>succeeded</i>\"]\n  b[\"b<br/><small>files</small>\"]\n  a -.->|if| b\n"
	if m.String() != wantM {
		t.Errorf("mermaid:\n%s\nwant:\n%s", m.String(), wantM)
	}
	// dot's own line break: one backslash, not a literal "\n".
	for _, s := range []string{`"a" [label="a\nwork\n(succeeded)"];`, `"b" [label="b\nfiles"];`, `"a" -> "b" [style=dashed, label="if"];`} {
		if !strings.Contains(d.String(), s) {
			t.Errorf("dot lacks %s:\n%s", s, d.String())
		}
	}
}

// TestResumeChecksOutputsOfSucceededStages: on resume, a succeeded stage
// whose path output is gone or changed runs again (with its dependents)
// and the log says why; one whose output is intact keeps its result.
func TestResumeChecksOutputsOfSucceededStages(t *testing.T) {
	w := newWorkspace(t)
	const src = `version: 1
name: outputs
stages:
  gone: {uses: files}
  after: {uses: work, needs: gone}
  changed: {uses: files}
  intact: {uses: files}
  broken: {uses: work}
`
	fail := true
	files := filesRun(map[string]string{"gone": "g", "changed": "c", "intact": "i"})
	l := &scriptLauncher{run: func(ctx context.Context, c call, emit func(plugins.Event)) (map[string]any, error) {
		if c.stage == "broken" && fail {
			return nil, errors.New("broke")
		}
		return files(ctx, c, emit)
	}}
	first, err := w.run(w.engine(l), src)
	if !errors.Is(err, ErrStageFailed) {
		t.Fatalf("first run: %v", err)
	}
	dirOf := func(sid string) string { return first.Stages[sid].Outputs["dir"].(string) }
	if err := os.RemoveAll(dirOf("gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirOf("changed"), "out.txt"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	fail = false
	l.calls = nil
	var log bytes.Buffer
	e := w.engine(l)
	e.Log = zerolog.New(&log)
	_, final, err := e.Resume(context.Background(), first.ID)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	ran := l.ran()
	sort.Strings(ran)
	if got := strings.Join(ran, ","); got != "after,broken,changed,gone" {
		t.Errorf("resume ran %s, want after,broken,changed,gone", got)
	}
	if final.Status != StatusSucceeded {
		t.Errorf("resume ended %s", final.Status)
	}
	for _, want := range []string{
		"[gone] runs again: output dir (" + dirOf("gone") + ") is gone",
		"[changed] runs again: output dir (" + dirOf("changed") + ") changed since the stage produced it",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	if strings.Contains(log.String(), "[intact] runs again") {
		t.Errorf("intact stage rerun:\n%s", log.String())
	}
}

// A stage that runs again on resume logs to its own stage.log and records
// that path, whatever an edited run.json named as its log.
func TestResumeKeepsLogsInTheRunDirectory(t *testing.T) {
	w := newWorkspace(t)
	fail := true
	l := &scriptLauncher{run: func(context.Context, call, func(plugins.Event)) (map[string]any, error) {
		if fail {
			return nil, errors.New("boom")
		}
		return map[string]any{"n": 1}, nil
	}}
	first, err := w.run(w.engine(l), "version: 1\nname: p\nstages:\n  a: {uses: work}\n")
	if !errors.Is(err, ErrStageFailed) {
		t.Fatalf("first run: %v", err)
	}
	dir, err := w.store.RunDir(first.ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Stages["a"].Log = "/etc/passwd"
	if err := saveState(dir, st); err != nil {
		t.Fatal(err)
	}
	fail = false
	_, final, err := w.engine(l).Resume(context.Background(), first.ID)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := final.Stages["a"].Log; got != filepath.Join("stages", "a", "stage.log") {
		t.Errorf("log after resume = %q, want stages/a/stage.log", got)
	}
}

// TestProgressFollowsLowestRank: on a server of a multi-host job without
// rank 0, the steps of its lowest rank are the stage's progress; a higher
// rank's are not.
func TestProgressFollowsLowestRank(t *testing.T) {
	w := newWorkspace(t)
	l := &scriptLauncher{run: func(_ context.Context, c call, emit func(plugins.Event)) (map[string]any, error) {
		now := time.Now()
		for step := int64(1); step <= 3; step++ {
			for _, rank := range []int{8, 9, 15} {
				emit(plugins.Event{Time: now, Step: &plugins.StepEvent{Rank: rank, Epoch: 1, Step: step, GlobalStep: step, TotalSteps: 3, Loss: 2}})
			}
		}
		return map[string]any{"n": 1}, nil
	}}
	e := w.engine(l)
	pv := &progressRecorder{}
	e.Progress = pv
	w.mustRun(e, "version: 1\nname: lead\nstages:\n  a: {uses: work}\n")
	if pv.progress != 3 {
		t.Errorf("progress view got %d updates, want rank 8's 3", pv.progress)
	}
}
