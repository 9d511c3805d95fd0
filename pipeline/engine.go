package pipeline

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
	"github.com/rs/zerolog"
)

// Launcher starts the plugin process of a stage.
type Launcher interface {
	// Identity names the plugin a stage uses for its cache key: name,
	// version and a digest of the executable. It must not start the plugin.
	Identity(ctx context.Context, p *spec.Pipeline, s *spec.Stage) (string, error)
	// Launch starts the plugin; log receives its stdout and stderr.
	Launch(ctx context.Context, p *spec.Pipeline, s *spec.Stage, log io.Writer) (Process, error)
}

// ProgressView shows the progress of running stages. Its methods are
// called from the goroutines running stages and must return promptly;
// Ended comes once per stage, after its last Progress.
type ProgressView interface {
	Progress(stage string, p plugins.ProgressEvent)
	Ended(stage string, status Status)
}

// Process is a started stage plugin.
type Process interface {
	Run(ctx context.Context, req plugins.RunRequest, emit func(plugins.Event)) (map[string]any, error)
	Close() error
}

// ClusterInfo returns the number of devices and hosts of a rank table file.
type ClusterInfo func(rankTable string) (devices, hosts int, err error)

// Engine runs pipelines. Its fields are set once; an Engine may run one
// pipeline at a time.
type Engine struct {
	Store    *Store
	Launcher Launcher
	Catalog  spec.Catalog
	// Log receives one event per run and stage transition and per plugin
	// log record. Each event's message is the line a person reads ("[train]
	// started (npu/train)"), its fields (event, run, stage, status, reason…)
	// what a machine reads; the caller picks the format. Progress, metric
	// and artifact events and plugin debug records come at debug level.
	// The zero Logger discards everything.
	Log zerolog.Logger
	// Progress, when set, is told of running stages' progress events and
	// of the end of every stage, for a live view such as bars on a
	// terminal.
	Progress ProgressView
	// Jobs is how many stages may run at once (at least 1).
	Jobs int
	// NoCache runs every stage even when an earlier run has its outputs.
	NoCache bool
	// Env is what ${{ env.NAME }} reads (usually the process environment).
	Env map[string]string
	// RankTable reads a cluster's rank table (required when specs use
	// rank tables).
	RankTable ClusterInfo
	// Now is the clock; nil means time.Now. Stage timeouts are decided on
	// this clock too (see [ErrTimeout]).
	Now func() time.Time
	// Sleep waits d or until ctx is done, between the attempts of a
	// retried stage; nil means a timer.
	Sleep func(ctx context.Context, d time.Duration)
	// CleanupTimeout bounds the stages that still run after the run was
	// interrupted (those whose `if` is true with cancelled(), such as
	// always()), as GitHub Actions bounds them with cancel-timeout-minutes;
	// 0 means DefaultCleanupTimeout.
	CleanupTimeout time.Duration
}

// DefaultCleanupTimeout is GitHub Actions' default cancel-timeout-minutes.
const DefaultCleanupTimeout = 5 * time.Minute

type forceKey struct{}

// WithForceStop returns ctx carrying force. Cancelling the context given to
// Run interrupts the run: running stages are cancelled, and pending stages
// whose `if` is true once cancelled() is (always(), cancelled()) still run,
// as GitHub Actions runs them after a workflow is cancelled. Cancelling
// force stops those too (a second Ctrl-C).
func WithForceStop(ctx, force context.Context) context.Context {
	return context.WithValue(ctx, forceKey{}, force)
}

// cleanupContext is the context of the stages that run after ctx was
// cancelled: not cancelled with ctx, but by the force-stop context carried
// in ctx, if any, and after the cleanup timeout.
func (e *Engine) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	limit := e.CleanupTimeout
	if limit <= 0 {
		limit = DefaultCleanupTimeout
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	if force, ok := ctx.Value(forceKey{}).(context.Context); ok {
		stop := context.AfterFunc(force, cancel)
		return c, func() { stop(); cancel() }
	}
	return c, cancel
}

// Run starts a new run of a validated pipeline. specData is the spec file's
// content, kept in the run directory; params holds every param's value.
// The returned state is the run's final state, also when the error is
// non-nil because a stage failed or the run was cancelled. A failed stage's
// error wraps ErrStageFailed and a *StageError with its cause. The process
// holds the run directory's lock until Run returns (see ErrRunLocked).
func (e *Engine) Run(ctx context.Context, p *spec.Pipeline, specData []byte, params map[string]any) (*RunState, error) {
	g, err := NewGraph(p)
	if err != nil {
		return nil, err
	}
	now := e.now()
	id := newRunID(now)
	dir, err := filepath.Abs(filepath.Join(e.Store.Dir, id))
	if err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "stages"), 0o755); err != nil {
		discardRunDir(dir)
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	lock, err := lockRun(dir)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	if err := atomicfile.WriteFile(filepath.Join(dir, "pipeline.yaml"), specData, 0o644); err != nil {
		discardRunDir(dir)
		return nil, fmt.Errorf("keep the spec in the run directory: %w", err)
	}
	// Stages run in their own directories: give them absolute paths.
	if params, err = absSpec(p, params); err != nil {
		discardRunDir(dir)
		return nil, err
	}
	specDir := p.BaseDir
	st := &RunState{
		Version: stateVersion, ID: id, Pipeline: p.Name, SpecFile: p.File, SpecDir: specDir,
		SpecSHA256: fmt.Sprintf("%x", sha256.Sum256(specData)), Params: params, Status: StatusRunning, Created: now, Updated: now,
		Stages: map[string]*StageState{}, Order: g.Order,
	}
	for _, sid := range g.Order {
		s := p.StageByID(sid)
		st.Stages[sid] = &StageState{Status: StatusPending, Uses: s.Uses, Log: stageLogName(sid)}
	}
	final, err := e.execute(ctx, p, g, dir, st)
	if final == nil {
		discardRunDir(dir)
	}
	return final, err
}

// absSpec makes the spec's directory absolute, and with it every relative
// path param (see spec.AbsParams): the one rule for paths in a spec.
func absSpec(p *spec.Pipeline, params map[string]any) (map[string]any, error) {
	specDir, err := filepath.Abs(p.BaseDir)
	if err != nil {
		return nil, fmt.Errorf("spec directory: %w", err)
	}
	p.BaseDir = specDir
	return spec.AbsParams(p, params)
}

// discardRunDir removes the directory of a new run that failed before its
// run.json was first written (a full disk, most often): it holds nothing to
// resume or inspect, and `runs` would list it as a broken run.
func discardRunDir(dir string) {
	_ = os.RemoveAll(dir)
}

// Resume continues a run that failed, was cancelled or was interrupted
// (its mspipe killed): stages that did not end succeeded, cached or skipped
// run again, with every stage that depends on them; the others keep their
// outputs. A run another live process owns is refused with ErrRunLocked.
func (e *Engine) Resume(ctx context.Context, id string) (*spec.Pipeline, *RunState, error) {
	dir, err := e.Store.RunDir(id)
	if err != nil {
		return nil, nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, nil, fmt.Errorf("run %s: %w", id, err)
	}
	// The state is read under the lock: a live owner may still change it.
	lock, err := lockRun(dir)
	if err != nil {
		return nil, nil, err
	}
	defer lock.release()
	st, err := LoadState(dir)
	if err != nil {
		return nil, nil, err
	}
	if st.Status == StatusSucceeded {
		return nil, st, fmt.Errorf("run %s: %w: it succeeded", id, ErrNothingToResume)
	}
	specPath := filepath.Join(dir, "pipeline.yaml")
	p, problems, err := spec.Load(specPath)
	if err != nil {
		return nil, nil, err
	}
	e.sayIfSpecChanged(ctx, st, specPath)
	p.BaseDir = st.SpecDir
	problems = append(problems, spec.Validate(p, e.Catalog, spec.Options{})...)
	if err := problems.Err(); err != nil {
		return p, nil, fmt.Errorf("run %s: its spec no longer validates: %w", id, err)
	}
	g, err := NewGraph(p)
	if err != nil {
		return p, nil, err
	}
	if len(g.Order) != len(st.Order) {
		return p, nil, fmt.Errorf("run %s: %w: run.json has %d stages, pipeline.yaml %d", id, ErrCorruptState, len(st.Order), len(g.Order))
	}
	for _, sid := range g.Order {
		if st.Stages[sid] == nil {
			return p, nil, fmt.Errorf("run %s: %w: stage %q of pipeline.yaml has no state", id, ErrCorruptState, sid)
		}
	}
	var again []string
	for _, sid := range g.Order {
		if !st.Stages[sid].Status.Done() {
			again = append(again, sid)
			continue
		}
		rerun, err := e.outputsGone(ctx, st, sid)
		if err != nil {
			return p, nil, fmt.Errorf("run %s: %w", id, err)
		}
		if rerun {
			again = append(again, sid)
		}
	}
	for d := range g.Downstream(again...) {
		again = append(again, d)
	}
	for _, sid := range again {
		ss := st.Stages[sid]
		// The log is where this engine writes it, whatever run.json said:
		// a path from the file is data, and may point anywhere.
		*ss = StageState{Status: StatusPending, Uses: ss.Uses, Log: stageLogName(sid), Attempts: ss.Attempts}
	}
	if !st.Terminal() {
		// run.json still says running, yet its owner released the lock
		// without recording an end: it was killed. Nothing is written
		// back before now; from here this process owns the run.
		e.Log.Warn().Str("event", "run_interrupted").Str("run", id).
			Msgf("run %s was interrupted: its mspipe process ended without recording how the run ended", id)
	}
	st.Status, st.Error, st.Finished = StatusRunning, "", nil
	final, err := e.execute(ctx, p, g, dir, st)
	return p, final, err
}

// sayIfSpecChanged warns, before a resume, when the run's copy of its spec
// was edited since the run started (resume runs the edited copy), or when
// the spec file the run was started from no longer matches that copy
// (resume does not run the edited original).
func (e *Engine) sayIfSpecChanged(ctx context.Context, st *RunState, copyPath string) {
	digest := func(path string) (string, error) {
		data, err := userfile.ReadFile(ctx, path, spec.MaxFileSize)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%x", sha256.Sum256(data)), nil
	}
	copySum, err := digest(copyPath)
	if err != nil {
		return // spec.Load has just read it; nothing to compare
	}
	if st.SpecSHA256 != "" && copySum != st.SpecSHA256 {
		e.Log.Warn().Str("event", "spec_changed").Str("run", st.ID).Str("spec", copyPath).
			Msgf("run %s: its spec %s was edited since the run started: resume runs the edited spec", st.ID, copyPath)
	}
	orig := st.SpecFile
	if orig == "" {
		return
	}
	if !filepath.IsAbs(orig) {
		orig = filepath.Join(st.SpecDir, filepath.Base(orig))
	}
	if origSum, err := digest(orig); err == nil && origSum != copySum {
		e.Log.Warn().Str("event", "spec_changed").Str("run", st.ID).Str("spec", orig).
			Msgf("run %s: %s changed since the run started; resume runs the run's own copy %s (start a new run to use the edited spec)", st.ID, orig, copyPath)
	}
}

// outputsGone reports whether a stage that ended succeeded or cached must
// run again on resume because one of its path outputs is missing or no
// longer has the content recorded in run.json, and says why on the log.
// Only an interruption is an error.
func (e *Engine) outputsGone(ctx context.Context, st *RunState, sid string) (bool, error) {
	ss := st.Stages[sid]
	if ss.Status != StatusSucceeded && ss.Status != StatusCached {
		return false, nil
	}
	digests := storeDigests(e.Store, false)
	why := artifactsUnchanged(ctx, ss, func(_, path string) (string, error) {
		h, err := pathDigest(ctx, path, digests, nil)
		_ = digests.save() // only saves time later
		return h, err
	})
	if why == nil {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	e.Log.Warn().Str("event", "stage_outputs_changed").Str("run", st.ID).Str("stage", sid).Str("reason", why.Error()).
		Msgf("[%s] runs again: %v", sid, why)
	return true, nil
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Engine) sleep(ctx context.Context, d time.Duration) {
	if e.Sleep != nil {
		e.Sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// execute runs the pending stages of st and records how the run ended.
func (e *Engine) execute(ctx context.Context, p *spec.Pipeline, g *Graph, dir string, st *RunState) (*RunState, error) {
	resolver, err := spec.NewResolver(p, e.Catalog)
	if err != nil {
		return nil, err
	}
	ev, err := os.OpenFile(filepath.Join(dir, "events.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open events log: %w", err)
	}
	defer ev.Close()
	r := newRunner(e, p, g, dir, st, resolver)
	r.events = zerolog.New(ev).With().Timestamp().Str("run", st.ID).Logger()
	r.events.Info().Str("event", "run_started").Str("pipeline", p.Name).Msg("run started")
	r.log.Info().Str("event", "run_started").Str("pipeline", p.Name).Str("dir", dir).
		Msgf("run %s of %s (%s)", st.ID, p.Name, dir)
	if err := r.reserveSpace(); err != nil {
		return nil, err
	}
	defer r.releaseReserve()
	r.mu.Lock()
	r.saveLocked()
	r.mu.Unlock()
	if r.saveErr != nil {
		return nil, r.saveErr
	}
	start := e.now()
	r.schedule(ctx)

	r.mu.Lock()
	defer r.mu.Unlock()
	counts := map[Status]int{}
	var failed []string
	for _, sid := range st.Order {
		ss := st.Stages[sid]
		counts[ss.Status]++
		if ss.Status == StatusFailed {
			failed = append(failed, sid)
		}
	}
	switch {
	case r.saveErr != nil:
		st.Status = StatusFailed
		st.Error = r.saveErr.Error()
	case ctx.Err() != nil || counts[StatusCancelled] > 0:
		st.Status = StatusCancelled
		st.Error = "interrupted"
	case len(failed) > 0:
		st.Status = StatusFailed
		st.Error = fmt.Sprintf("stage %s failed: %s", failed[0], st.Stages[failed[0]].Reason)
	default:
		st.Status = StatusSucceeded
	}
	for _, sid := range st.Order {
		if ss := st.Stages[sid]; ss.Status == StatusPending && ss.Reason == "" {
			ss.Reason = "not run: " + st.Error
		}
	}
	fin := e.now()
	st.Finished = &fin
	saveErr := r.saveErr
	r.saveLocked()
	if saveErr == nil && r.saveErr != nil {
		return st, fmt.Errorf("run %s: %w", st.ID, r.saveErr)
	}
	r.events.Info().Str("event", "run_finished").Str("status", string(st.Status)).Msg("run finished")
	var parts []string
	for _, s := range []Status{StatusSucceeded, StatusCached, StatusSkipped, StatusFailed, StatusCancelled, StatusPending} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	took := fin.Sub(start).Round(time.Millisecond)
	r.log.Info().Str("event", "run_finished").Str("status", string(st.Status)).Float64("seconds", took.Seconds()).
		Msgf("run %s %s in %s: %s", st.ID, st.Status, took, strings.Join(parts, ", "))
	switch {
	case saveErr != nil:
		return st, fmt.Errorf("run %s: %w", st.ID, saveErr)
	case st.Status == StatusFailed:
		if se := r.stageErrs[failed[0]]; se != nil {
			return st, fmt.Errorf("run %s: %w: %w", st.ID, ErrStageFailed, se)
		}
		return st, fmt.Errorf("run %s: %w: %s", st.ID, ErrStageFailed, st.Error)
	case st.Status == StatusCancelled:
		if ctx.Err() != nil {
			return st, fmt.Errorf("run %s: %w", st.ID, ctx.Err())
		}
		return st, fmt.Errorf("run %s: cancelled", st.ID)
	}
	return st, nil
}

// stageLogName is a stage's log, relative to the run directory.
func stageLogName(sid string) string { return filepath.Join("stages", sid, "stage.log") }
