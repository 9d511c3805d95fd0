package pipeline

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
)

// fakeCatalog declares one stage type, "work", with an int output.
type fakeCatalog struct{}

func (fakeCatalog) Names() []string { return []string{"work"} }
func (fakeCatalog) Stage(uses string) (*spec.StageInfo, error) {
	return &spec.StageInfo{Name: uses, Outputs: []spec.OutputDecl{{Name: "n", Type: spec.TypeInt}}}, nil
}

// fakeLauncher runs stages in-process; run decides what each does.
type fakeLauncher struct {
	run func(ctx context.Context, id string) (map[string]any, error)
}

func (f fakeLauncher) Identity(context.Context, *spec.Pipeline, *spec.Stage) (string, error) {
	return "work@1", nil
}

func (f fakeLauncher) Launch(_ context.Context, _ *spec.Pipeline, s *spec.Stage, _ io.Writer) (Process, error) {
	return fakeProcess{id: s.ID, run: f.run}, nil
}

type fakeProcess struct {
	id  string
	run func(ctx context.Context, id string) (map[string]any, error)
}

func (p fakeProcess) Run(ctx context.Context, _ plugins.RunRequest, _ func(plugins.Event)) (map[string]any, error) {
	return p.run(ctx, p.id)
}
func (fakeProcess) Close() error { return nil }

func load(t *testing.T, src string) *spec.Pipeline {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p, errs, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	errs = append(errs, spec.Validate(p, fakeCatalog{}, spec.Options{})...)
	if errs.Err() != nil {
		t.Fatal(errs)
	}
	return p
}

// TestCancelWithStagesWaitingForASlot: with --jobs 1, cancelling while one
// stage runs and another waits for a slot ends the run promptly (the
// waiting stage stays pending) instead of spinning.
func TestCancelWithStagesWaitingForASlot(t *testing.T) {
	p := load(t, "version: 1\nname: two\nstages:\n  a: {uses: work}\n  b: {uses: work}\n")
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 2)
	eng := &Engine{
		Store: &Store{Dir: t.TempDir()}, Catalog: fakeCatalog{}, Jobs: 1,
		Launcher: fakeLauncher{run: func(ctx context.Context, id string) (map[string]any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}},
	}
	go func() { <-started; cancel() }()
	done := make(chan struct{})
	var st *RunState
	var err error
	go func() { st, err = eng.Run(ctx, p, []byte("x"), nil); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if !errors.Is(err, context.Canceled) || st.Status != StatusCancelled {
		t.Fatalf("err %v, status %s; want cancelled", err, st.Status)
	}
	if st.Stages["a"].Status != StatusCancelled || st.Stages["b"].Status != StatusPending {
		t.Errorf("a %s, b %s; want cancelled, pending", st.Stages["a"].Status, st.Stages["b"].Status)
	}
}

// TestJobsLimitsParallelism: four independent stages with --jobs 2 never
// run more than two at a time, two do run at once, and all succeed. The
// first stages wait for a second one to be running (not for a time), so
// the figure does not depend on the machine's load.
func TestJobsLimitsParallelism(t *testing.T) {
	p := load(t, "version: 1\nname: four\nstages:\n  a: {uses: work}\n  b: {uses: work}\n  c: {uses: work}\n  d: {uses: work}\n")
	var mu sync.Mutex
	running, peak := 0, 0
	two := make(chan struct{})
	var once sync.Once
	eng := &Engine{
		Store: &Store{Dir: t.TempDir()}, Catalog: fakeCatalog{}, Jobs: 2, NoCache: true,
		Launcher: fakeLauncher{run: func(ctx context.Context, id string) (map[string]any, error) {
			mu.Lock()
			running++
			peak = max(peak, running)
			if running == 2 {
				once.Do(func() { close(two) })
			}
			mu.Unlock()
			select {
			case <-two:
			case <-time.After(30 * time.Second): // the engine never ran two at once
			}
			mu.Lock()
			running--
			mu.Unlock()
			return map[string]any{"n": 1}, nil
		}},
	}
	st, err := eng.Run(context.Background(), p, []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if peak != 2 {
		t.Errorf("peak parallelism %d, want 2", peak)
	}
	for id, s := range st.Stages {
		if s.Status != StatusSucceeded {
			t.Errorf("%s: %s", id, s.Status)
		}
	}
}

// TestLoadStateKeepsTypes: values read back from run.json have the types
// expressions expect: integral numbers as int, others as float64, null as nil.
func TestLoadStateKeepsTypes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "20261123-000000-abcdef")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	st := &RunState{Version: stateVersion, ID: filepath.Base(dir), Status: StatusSucceeded, Order: []string{"a"},
		Stages: map[string]*StageState{"a": {Status: StatusSucceeded, CacheKey: "k",
			Outputs: map[string]any{"n": 3, "f": 0.5, "none": nil, "l": []any{1, nil}}}}}
	if err := saveState(dir, st); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := got.Stages["a"].Outputs
	if out["n"] != 3 || out["f"] != 0.5 || out["none"] != nil {
		t.Errorf("outputs = %#v", out)
	}
	if l, ok := out["l"].([]any); !ok || l[0] != 1 || l[1] != nil {
		t.Errorf("list = %#v", out["l"])
	}
}

// schemaCatalog declares "count", whose `with` needs an integer n of at
// least 1, and "any", which declares no schema.
type schemaCatalog struct{}

func (schemaCatalog) Names() []string { return []string{"any", "count"} }
func (schemaCatalog) Stage(uses string) (*spec.StageInfo, error) {
	info := &spec.StageInfo{Name: uses}
	if uses == "count" {
		info.WithSchema = []byte(`{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"],"additionalProperties":false}`)
	}
	return info, nil
}

// identityLauncher names each plugin after its uses, and records which
// stages were launched.
type identityLauncher struct {
	mu       chan struct{}
	launched map[string]bool
}

func (l *identityLauncher) Identity(_ context.Context, _ *spec.Pipeline, s *spec.Stage) (string, error) {
	return s.Uses + "@1", nil
}

func (l *identityLauncher) Launch(_ context.Context, _ *spec.Pipeline, s *spec.Stage, _ io.Writer) (Process, error) {
	l.mu <- struct{}{}
	l.launched[s.ID] = true
	<-l.mu
	return fakeProcess{id: s.ID, run: func(context.Context, string) (map[string]any, error) { return nil, nil }}, nil
}

// TestResolvedWithCheckedBeforeLaunch: a `with` value from a param passes
// validation (its default fits); the value the run gets breaks the schema, so the stage fails
// before its plugin starts, naming the place in the spec, and what needs it
// does not run. The run state is kept.
func TestResolvedWithCheckedBeforeLaunch(t *testing.T) {
	src := `version: 1
name: late
params:
  n: {type: int, default: 1}
stages:
  good: {uses: count, with: {n: 2}}
  free: {uses: any, with: {n: "${{ params.n }}"}}
  bad: {uses: count, with: {n: "${{ params.n }}"}}
  after: {uses: count, needs: bad, with: {n: 1}}
`
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p, errs, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if errs = append(errs, spec.Validate(p, schemaCatalog{}, spec.Options{})...); errs.Err() != nil {
		t.Fatal(errs)
	}
	l := &identityLauncher{mu: make(chan struct{}, 1), launched: map[string]bool{}}
	store := &Store{Dir: t.TempDir()}
	eng := &Engine{Store: store, Catalog: schemaCatalog{}, Launcher: l, Jobs: 2}

	plan, err := eng.Plan(context.Background(), p, map[string]any{"n": 0})
	if err != nil {
		t.Fatal(err)
	}
	wantReason := path + ":8:32: stages.bad.with.n: minimum: got 0, want 1"
	for _, ps := range plan {
		if ps.ID == "bad" && (ps.Action != "unknown" || ps.Detail != wantReason) {
			t.Errorf("plan of bad: %s, %q; want unknown, %q", ps.Action, ps.Detail, wantReason)
		}
	}

	st, err := eng.Run(context.Background(), p, []byte(src), map[string]any{"n": 0})
	if !errors.Is(err, ErrStageFailed) {
		t.Fatalf("err = %v, want a failed stage", err)
	}
	for id, want := range map[string]Status{"good": StatusSucceeded, "free": StatusSucceeded, "bad": StatusFailed, "after": StatusPending} {
		if got := st.Stages[id].Status; got != want {
			t.Errorf("stage %s: %s, want %s", id, got, want)
		}
	}
	if got := st.Stages["bad"].Reason; got != wantReason {
		t.Errorf("reason %q, want %q", got, wantReason)
	}
	if l.launched["bad"] || l.launched["after"] {
		t.Errorf("launched %v; bad and after must not start", l.launched)
	}
	saved, err := LoadState(filepath.Join(store.Dir, st.ID))
	if err != nil {
		t.Fatal(err)
	}
	if ss := saved.Stages["bad"]; ss.Status != StatusFailed || ss.Reason != wantReason || ss.With["n"] != 0 {
		t.Errorf("run.json has bad = %+v", ss)
	}
}
