package pipeline

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
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
// run more than two at a time, and all succeed.
func TestJobsLimitsParallelism(t *testing.T) {
	p := load(t, "version: 1\nname: four\nstages:\n  a: {uses: work}\n  b: {uses: work}\n  c: {uses: work}\n  d: {uses: work}\n")
	var mu = make(chan struct{}, 1)
	running, peak := 0, 0
	eng := &Engine{
		Store: &Store{Dir: t.TempDir()}, Catalog: fakeCatalog{}, Jobs: 2, NoCache: true,
		Launcher: fakeLauncher{run: func(ctx context.Context, id string) (map[string]any, error) {
			mu <- struct{}{}
			running++
			peak = max(peak, running)
			<-mu
			time.Sleep(50 * time.Millisecond)
			mu <- struct{}{}
			running--
			<-mu
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
