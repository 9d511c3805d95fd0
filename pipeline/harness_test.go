package pipeline

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
)

// testCatalog declares the stage types the engine tests use:
//   - "work": any `with`, an int output n;
//   - "files": any `with`, a path output dir.
type testCatalog struct{}

func (testCatalog) Names() []string { return []string{"files", "work"} }
func (testCatalog) Stage(uses string) (*spec.StageInfo, error) {
	switch uses {
	case "work":
		return &spec.StageInfo{Name: uses, Outputs: []spec.OutputDecl{{Name: "n", Type: spec.TypeInt}}}, nil
	case "files":
		return &spec.StageInfo{Name: uses, Outputs: []spec.OutputDecl{{Name: "dir", Type: spec.TypePath}}}, nil
	}
	return nil, fmt.Errorf("no stage %q", uses)
}

// call is one Run of a fake plugin.
type call struct {
	stage string
	req   plugins.RunRequest
}

// scriptLauncher starts fake plugins that run in-process: run decides
// what each Run does. It records every Run and how many Close calls came.
type scriptLauncher struct {
	ident     func(s *spec.Stage) string // nil: "<uses>@1"
	launchErr error                      // returned by every Launch
	run       func(ctx context.Context, c call, emit func(plugins.Event)) (map[string]any, error)

	mu     sync.Mutex
	calls  []call
	closed int
}

func (l *scriptLauncher) Identity(_ context.Context, _ *spec.Pipeline, s *spec.Stage) (string, error) {
	if l.ident != nil {
		return l.ident(s), nil
	}
	return s.Uses + "@1", nil
}

func (l *scriptLauncher) Launch(_ context.Context, _ *spec.Pipeline, s *spec.Stage, _ io.Writer) (Process, error) {
	if l.launchErr != nil {
		return nil, l.launchErr
	}
	return &scriptProcess{l: l, stage: s.ID}, nil
}

// ran returns the stages run, in order, one entry per Run.
func (l *scriptLauncher) ran() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		out = append(out, c.stage)
	}
	return out
}

type scriptProcess struct {
	l     *scriptLauncher
	stage string
}

func (p *scriptProcess) Run(ctx context.Context, req plugins.RunRequest, emit func(plugins.Event)) (map[string]any, error) {
	c := call{stage: p.stage, req: req}
	p.l.mu.Lock()
	p.l.calls = append(p.l.calls, c)
	p.l.mu.Unlock()
	if p.l.run == nil {
		return map[string]any{"n": 1}, nil
	}
	return p.l.run(ctx, c, emit)
}

func (p *scriptProcess) Close() error {
	p.l.mu.Lock()
	p.l.closed++
	p.l.mu.Unlock()
	return nil
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// workspace is a spec directory and a runs directory.
type workspace struct {
	t     *testing.T
	dir   string
	store *Store
}

func newWorkspace(t *testing.T) *workspace {
	t.Helper()
	dir := t.TempDir()
	return &workspace{t: t, dir: dir, store: &Store{Dir: filepath.Join(dir, "runs")}}
}

// write creates a file of the spec directory.
func (w *workspace) write(name, content string) string {
	w.t.Helper()
	path := filepath.Join(w.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// load writes and validates a spec in the workspace.
func (w *workspace) load(src string) *spec.Pipeline {
	w.t.Helper()
	path := w.write("pipeline.yaml", src)
	p, errs, err := spec.Load(path)
	if err != nil {
		w.t.Fatal(err)
	}
	errs = append(errs, spec.Validate(p, testCatalog{}, spec.Options{})...)
	if errs.Err() != nil {
		w.t.Fatal(errs)
	}
	return p
}

// engine returns an engine over the workspace's store with l.
func (w *workspace) engine(l Launcher) *Engine {
	return &Engine{Store: w.store, Launcher: l, Catalog: testCatalog{}, Jobs: 2,
		RankTable: func(path string) (int, int, error) { return 2, 1, nil }}
}

// run runs src and returns the final state; a Run error fails the test
// unless wantErr.
func (w *workspace) run(e *Engine, src string) (*RunState, error) {
	w.t.Helper()
	p := w.load(src)
	params := map[string]any{}
	for _, prm := range p.Params {
		params[prm.Name] = prm.Default
	}
	st, err := e.Run(context.Background(), p, []byte(src), params)
	if st == nil {
		w.t.Fatalf("Run returned no state: %v", err)
	}
	return st, err
}

// mustRun is run for a run that must succeed.
func (w *workspace) mustRun(e *Engine, src string) *RunState {
	w.t.Helper()
	st, err := w.run(e, src)
	if err != nil {
		w.t.Fatalf("run: %v", err)
	}
	return st
}

// statuses returns each stage's status.
func statuses(st *RunState) map[string]Status { return st.StatusMap() }
