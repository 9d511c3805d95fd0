package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
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
	// Console receives one human-readable line per stage event; nil discards.
	Console io.Writer
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
	// RankTable reads a cluster's rank table; nil treats a rank table
	// cluster as one device per line of... (required when specs use rank tables).
	RankTable ClusterInfo
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Run starts a new run of a validated pipeline. specData is the spec file's
// content, kept in the run directory; params holds every param's value.
// The returned state is the run's final state, also when the error is
// non-nil because a stage failed or the run was cancelled.
func (e *Engine) Run(ctx context.Context, p *spec.Pipeline, specData []byte, params map[string]any) (*RunState, error) {
	g, err := NewGraph(p)
	if err != nil {
		return nil, err
	}
	now := e.now()
	id := newRunID(now)
	dir, err := filepath.Abs(filepath.Join(e.Store.Dir, id))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "stages"), 0o755); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "pipeline.yaml"), specData, 0o644); err != nil {
		return nil, err
	}
	specDir, err := filepath.Abs(p.BaseDir)
	if err != nil {
		return nil, err
	}
	// Stages run in their own directories: give them absolute paths.
	p.BaseDir = specDir
	st := &RunState{
		Version: stateVersion, ID: id, Pipeline: p.Name, SpecFile: p.File, SpecDir: specDir,
		Params: params, Status: StatusRunning, Created: now, Updated: now,
		Stages: map[string]*StageState{}, Order: g.Order,
	}
	for _, sid := range g.Order {
		s := p.StageByID(sid)
		st.Stages[sid] = &StageState{Status: StatusPending, Uses: s.Uses, Log: filepath.Join("stages", sid, "stage.log")}
	}
	return e.execute(ctx, p, g, dir, st)
}

// Resume continues a run that failed or was cancelled: stages that did not
// end succeeded, cached or skipped run again, with every stage that depends
// on them; the others keep their outputs.
func (e *Engine) Resume(ctx context.Context, id string) (*spec.Pipeline, *RunState, error) {
	dir, err := e.Store.RunDir(id)
	if err != nil {
		return nil, nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, nil, err
	}
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
		}
	}
	for d := range g.Downstream(again...) {
		again = append(again, d)
	}
	for _, sid := range again {
		ss := st.Stages[sid]
		*ss = StageState{Status: StatusPending, Uses: ss.Uses, Log: ss.Log, Attempts: ss.Attempts}
	}
	st.Status, st.Error, st.Finished = StatusRunning, "", nil
	final, err := e.execute(ctx, p, g, dir, st)
	return p, final, err
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// runner is the state of one execution of a run.
type runner struct {
	e        *Engine
	p        *spec.Pipeline
	g        *Graph
	dir      string
	resolver *spec.Resolver
	events   zerolog.Logger

	mu sync.Mutex // guards st and console writes
	st *RunState

	schemaMu sync.Mutex
	schemas  map[string]*spec.WithSchema // compiled `with` schemas by plugin identity
}

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
	r := &runner{
		e: e, p: p, g: g, dir: dir, st: st, resolver: resolver, schemas: map[string]*spec.WithSchema{},
		events: zerolog.New(ev).With().Timestamp().Str("run", st.ID).Logger(),
	}
	r.events.Info().Str("event", "run_started").Str("pipeline", p.Name).Msg("run started")
	r.console("run %s of %s (%s)", st.ID, p.Name, dir)
	if err := r.save(); err != nil {
		return nil, err
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
	if err := r.saveLocked(); err != nil {
		return st, err
	}
	r.events.Info().Str("event", "run_finished").Str("status", string(st.Status)).Msg("run finished")
	var parts []string
	for _, s := range []Status{StatusSucceeded, StatusCached, StatusSkipped, StatusFailed, StatusCancelled, StatusPending} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	r.consoleLocked("run %s %s in %s: %s", st.ID, st.Status, fin.Sub(start).Round(time.Millisecond), strings.Join(parts, ", "))
	switch st.Status {
	case StatusFailed:
		return st, fmt.Errorf("run %s: %w: %s", st.ID, ErrStageFailed, st.Error)
	case StatusCancelled:
		if ctx.Err() != nil {
			return st, fmt.Errorf("run %s: %w", st.ID, ctx.Err())
		}
		return st, fmt.Errorf("run %s: cancelled", st.ID)
	}
	return st, nil
}

// schedule starts stages as their needs finish, at most Jobs at once, and
// returns when nothing more can run.
func (r *runner) schedule(ctx context.Context) {
	jobs := max(r.e.Jobs, 1)
	done := make(chan string)
	running := map[string]bool{}
	for {
		r.mu.Lock()
		var ready []string
		for _, sid := range r.st.Order {
			ss := r.st.Stages[sid]
			if ss.Status != StatusPending || running[sid] || ctx.Err() != nil {
				continue
			}
			blocked, skip, wait := "", "", false
			for _, n := range r.g.Needs[sid] {
				switch ns := r.st.Stages[n].Status; {
				case ns == StatusSkipped:
					skip = n
				case ns.Done():
				case ns == StatusFailed || ns == StatusCancelled:
					blocked = n
				default:
					wait = true
				}
			}
			switch {
			case blocked != "":
				ss.Reason = fmt.Sprintf("not run: stage %s %s", blocked, r.st.Stages[blocked].Status)
			case wait:
			case skip != "":
				ss.Status, ss.Reason = StatusSkipped, fmt.Sprintf("needs stage %s, which was skipped", skip)
				r.consoleLocked("[%s] skipped: %s", sid, ss.Reason)
				r.events.Info().Str("event", "stage_skipped").Str("stage", sid).Str("reason", ss.Reason).Msg("stage skipped")
				_ = r.saveLocked()
			default:
				ready = append(ready, sid)
			}
		}
		r.mu.Unlock()
		if len(ready) > 0 && len(running) < jobs {
			// A skip above may have unblocked more: start what fits, then look again.
			for _, sid := range ready {
				if len(running) >= jobs {
					break
				}
				running[sid] = true
				go func(sid string) {
					r.runStage(ctx, sid)
					done <- sid
				}(sid)
			}
			continue
		}
		if len(running) == 0 {
			// Nothing runs: stop unless a skip just made a stage ready. After
			// cancellation nothing new starts, so stop at once.
			if ctx.Err() != nil || (len(ready) == 0 && !r.progressPossible()) {
				return
			}
			if len(ready) == 0 {
				continue
			}
		}
		delete(running, <-done)
	}
}

// progressPossible reports whether a pending stage could still become ready
// without anything running: true only when a skip was just propagated.
func (r *runner) progressPossible() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sid := range r.st.Order {
		if r.st.Stages[sid].Status != StatusPending {
			continue
		}
		ok := true
		for _, n := range r.g.Needs[sid] {
			if ns := r.st.Stages[n].Status; !ns.Done() && ns != StatusSkipped {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func (r *runner) save() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.saveLocked()
}

func (r *runner) saveLocked() error {
	r.st.Updated = r.e.now()
	return saveState(r.dir, r.st)
}

func (r *runner) console(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.consoleLocked(format, args...)
}

func (r *runner) consoleLocked(format string, args ...any) {
	if r.e.Console != nil {
		fmt.Fprintf(r.e.Console, format+"\n", args...)
	}
}

// scope is what expressions of stage s see now.
func (r *runner) scope(s *spec.Stage) (*spec.Scope, error) {
	sc := &spec.Scope{Params: r.st.Params, Stages: map[string]spec.StageValue{}, Env: r.e.Env,
		Run: spec.RunValue{ID: r.st.ID, Name: r.p.Name, Dir: r.dir}}
	for sid, ss := range r.st.Stages {
		sc.Stages[sid] = spec.StageValue{Status: string(ss.Status), Outputs: ss.Outputs}
	}
	c := r.p.EffectiveCluster(s)
	devices, err := r.resolver.Devices(c, sc)
	if err != nil {
		return nil, err
	}
	hosts := 1
	if c.RankTable != "" {
		if r.e.RankTable == nil {
			return nil, fmt.Errorf("cluster.rank_table: no rank table reader configured")
		}
		n, h, err := r.e.RankTable(r.p.Resolve(c.RankTable))
		if err != nil {
			return nil, err
		}
		devices, hosts = n, h
	} else if devices > 8 {
		hosts = devices / 8
	}
	sc.Cluster = spec.ClusterValue{Devices: devices, Hosts: hosts, RankTable: r.p.Resolve(c.RankTable)}
	return sc, nil
}

// stageError records why a stage ended badly.
func (r *runner) finish(sid string, status Status, reason string, started time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ss := r.st.Stages[sid]
	ss.Status, ss.Reason = status, reason
	fin := r.e.now()
	ss.Finished = &fin
	if !started.IsZero() {
		ss.Seconds = fin.Sub(started).Seconds()
	}
	_ = r.saveLocked()
	lvl := r.events.Info()
	if status == StatusFailed {
		lvl = r.events.Error()
	}
	lvl.Str("event", "stage_"+string(status)).Str("stage", sid).Str("reason", reason).Float64("seconds", ss.Seconds).Msg("stage " + string(status))
	if r.e.Progress != nil {
		r.e.Progress.Ended(sid, status)
	}
	switch status {
	case StatusFailed:
		// A stage refused before its plugin started (bad inputs) has no log.
		if log := filepath.Join(r.dir, ss.Log); ss.Log != "" && fileExists(log) {
			r.consoleLocked("[%s] failed after %s: %s (log: %s)", sid, dur(ss.Seconds), reason, log)
		} else {
			r.consoleLocked("[%s] failed after %s: %s", sid, dur(ss.Seconds), reason)
		}
	case StatusCancelled:
		r.consoleLocked("[%s] cancelled after %s", sid, dur(ss.Seconds))
	case StatusSkipped:
		r.consoleLocked("[%s] skipped: %s", sid, reason)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func dur(seconds float64) time.Duration {
	return time.Duration(seconds * float64(time.Second)).Round(time.Millisecond)
}

// runStage takes one stage from pending to a final state.
func (r *runner) runStage(ctx context.Context, sid string) {
	s := r.p.StageByID(sid)
	r.mu.Lock()
	sc, err := r.scope(s)
	r.mu.Unlock()
	if err != nil {
		r.finish(sid, StatusFailed, err.Error(), time.Time{})
		return
	}
	runIt, err := r.resolver.If(s, sc)
	if err != nil {
		r.finish(sid, StatusFailed, err.Error(), time.Time{})
		return
	}
	if !runIt {
		r.finish(sid, StatusSkipped, fmt.Sprintf("if %q was false", strings.TrimSpace(s.If.Raw)), time.Time{})
		return
	}
	with, err := r.resolver.With(s, sc)
	if err != nil {
		r.finish(sid, StatusFailed, err.Error(), time.Time{})
		return
	}
	r.mu.Lock()
	ss := r.st.Stages[sid]
	ss.With = with
	r.mu.Unlock()
	ident, err := r.e.Launcher.Identity(ctx, r.p, s)
	if err != nil {
		r.finish(sid, StatusFailed, err.Error(), time.Time{})
		return
	}
	if err := r.checkWith(s, ident, with); err != nil {
		r.finish(sid, StatusFailed, err.Error(), time.Time{})
		return
	}
	key, err := r.cacheKey(s, sc, ident, with)
	if err != nil {
		r.finish(sid, StatusFailed, err.Error(), time.Time{})
		return
	}
	r.mu.Lock()
	ss.CacheKey = key
	r.mu.Unlock()
	if !r.e.NoCache {
		if hit := r.lookupCache(key); hit != nil {
			r.mu.Lock()
			ss.Status, ss.Outputs, ss.Artifacts, ss.CachedFrom = StatusCached, hit.outputs, hit.artifacts, hit.runID
			ss.Reason = ""
			_ = r.saveLocked()
			r.events.Info().Str("event", "stage_cached").Str("stage", sid).Str("from", hit.runID).Msg("stage cached")
			r.consoleLocked("[%s] cached: outputs of run %s", sid, hit.runID)
			r.mu.Unlock()
			return
		}
	}
	r.attempts(ctx, s, sc, with)
}

// attempts runs the stage up to its retry limit.
func (r *runner) attempts(ctx context.Context, s *spec.Stage, sc *spec.Scope, with map[string]any) {
	sid := s.ID
	workDir := filepath.Join(r.dir, "stages", sid)
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		r.finish(sid, StatusFailed, fmt.Sprintf("create work dir: %v", err), time.Time{})
		return
	}
	logFile, err := os.OpenFile(filepath.Join(workDir, "stage.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.finish(sid, StatusFailed, fmt.Sprintf("open stage log: %v", err), time.Time{})
		return
	}
	defer logFile.Close()
	stageLog := &syncWriter{w: logFile}

	started := r.e.now()
	r.mu.Lock()
	ss := r.st.Stages[sid]
	ss.Status, ss.Started, ss.Reason = StatusRunning, &started, ""
	_ = r.saveLocked()
	r.events.Info().Str("event", "stage_started").Str("stage", sid).Str("uses", s.Uses).Msg("stage started")
	r.consoleLocked("[%s] started (%s)", sid, s.Uses)
	r.mu.Unlock()

	backoff := s.Retry.Backoff
	var lastErr error
	for attempt := 1; attempt <= max(s.Retry.MaxAttempts, 1); attempt++ {
		r.mu.Lock()
		ss.Attempts++
		_ = r.saveLocked()
		r.mu.Unlock()
		if attempt > 1 {
			r.console("[%s] attempt %d of %d after %s: %v", sid, attempt, s.Retry.MaxAttempts, backoff, lastErr)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff *= 2
		}
		if ctx.Err() != nil {
			r.finish(sid, StatusCancelled, "interrupted", started)
			return
		}
		fmt.Fprintf(stageLog, "--- attempt %d started %s\n", attempt, r.e.now().Format(time.RFC3339))
		outputs, err := r.attempt(ctx, s, sc, with, workDir, attempt, stageLog)
		if err == nil {
			artifacts, err := r.artifacts(s, outputs)
			if err != nil {
				r.finish(sid, StatusFailed, err.Error(), started)
				return
			}
			r.mu.Lock()
			ss.Outputs, ss.Artifacts = outputs, artifacts
			r.mu.Unlock()
			r.finish(sid, StatusSucceeded, "", started)
			r.console("[%s] succeeded in %s", sid, dur(ss.Seconds))
			return
		}
		fmt.Fprintf(stageLog, "--- attempt %d failed: %v\n", attempt, err)
		if ctx.Err() != nil {
			r.finish(sid, StatusCancelled, "interrupted", started)
			return
		}
		lastErr = err
	}
	r.finish(sid, StatusFailed, lastErr.Error(), started)
}

// attempt launches the plugin once and runs the stage with its timeout.
func (r *runner) attempt(ctx context.Context, s *spec.Stage, sc *spec.Scope, with map[string]any, workDir string, attempt int, log io.Writer) (map[string]any, error) {
	runCtx := ctx
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, s.Timeout)
		defer cancel()
	}
	proc, err := r.e.Launcher.Launch(runCtx, r.p, s, log)
	if err != nil {
		return nil, r.timeoutOr(runCtx, ctx, s, err)
	}
	defer proc.Close()
	env := map[string]string{}
	for k, v := range r.p.Env {
		env[k] = v
	}
	for k, v := range s.Env {
		env[k] = v
	}
	req := plugins.RunRequest{
		RunID: r.st.ID, StageID: s.ID, With: with, WorkDir: workDir, Attempt: attempt, Env: env,
		Cluster: plugins.Cluster{Devices: sc.Cluster.Devices, RankTable: sc.Cluster.RankTable},
	}
	outputs, err := proc.Run(runCtx, req, func(ev plugins.Event) { r.onEvent(s.ID, ev, log) })
	if err != nil {
		return nil, r.timeoutOr(runCtx, ctx, s, err)
	}
	return r.checkOutputs(s, outputs)
}

func (r *runner) timeoutOr(runCtx, ctx context.Context, s *spec.Stage, err error) error {
	if ctx.Err() == nil && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %s", s.Timeout)
	}
	return err
}

// checkOutputs converts outputs the spec declares (for exec and custom
// plugins) to their types; a declared output that is missing is an error.
func (r *runner) checkOutputs(s *spec.Stage, outputs map[string]any) (map[string]any, error) {
	if outputs == nil {
		outputs = map[string]any{}
	}
	for _, o := range s.Outputs {
		v, ok := outputs[o.Name]
		if !ok {
			return nil, fmt.Errorf("the stage did not produce output %q, which the spec declares", o.Name)
		}
		c, err := spec.ConvertValue(v, o.Type)
		if err != nil {
			return nil, fmt.Errorf("output %q: %v, got %v", o.Name, err, v)
		}
		outputs[o.Name] = c
	}
	return outputs, nil
}

// onEvent forwards a plugin event to the events log, the stage log and,
// for log records and metrics, the console; rank 0's training steps are
// the stage's progress.
func (r *runner) onEvent(sid string, ev plugins.Event, log io.Writer) {
	l := r.events.Info().Str("stage", sid)
	switch {
	case ev.Log != nil:
		l.Str("event", "log").Str("level", ev.Log.Level.String()).Fields(ev.Log.Fields).Msg(ev.Log.Message)
		text := ev.Log.Message + formatFields(ev.Log.Fields)
		fmt.Fprintf(log, "%s %s %s\n", ev.Time.Format(time.RFC3339), strings.ToUpper(ev.Log.Level.String()), text)
		if ev.Log.Level >= plugins.LevelInfo {
			r.console("[%s] %s", sid, text)
		}
	case ev.Progress != nil:
		l.Str("event", "progress").Int64("done", ev.Progress.Done).Int64("total", ev.Progress.Total).Str("unit", ev.Progress.Unit).Msg(ev.Progress.Message)
		if r.e.Progress != nil {
			r.e.Progress.Progress(sid, *ev.Progress)
		}
	case ev.Metric != nil:
		l.Str("event", "metric").Str("name", ev.Metric.Name).Float64("value", ev.Metric.Value).Int64("step", ev.Metric.Step).Msg("metric")
	case ev.Artifact != nil:
		l.Str("event", "artifact").Str("name", ev.Artifact.Name).Str("path", ev.Artifact.Path).Str("sha256", ev.Artifact.SHA256).Msg("artifact")
	case ev.Step != nil:
		st := ev.Step
		l.Str("event", "step").Int("rank", st.Rank).Int64("epoch", st.Epoch).Int64("step", st.Step).
			Int64("global_step", st.GlobalStep).Int64("total_steps", st.TotalSteps).Float64("loss", st.Loss).
			Float64("lr", st.LearningRate).Float64("images_per_second", st.ImagesPerSecond).
			Int64("device_memory", st.DeviceMemory).Bool("epoch_end", st.EpochEnd).Msg("step")
		if st.Rank == 0 && r.e.Progress != nil {
			r.e.Progress.Progress(sid, st.Progress())
		}
	}
}

// formatFields renders log fields as " key=value" in key order; the
// stream field of relayed stdout/stderr lines is left out as noise.
func formatFields(fields map[string]any) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if k != "stream" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, fields[k])
	}
	return b.String()
}

// syncWriter serializes writes from the plugin's output pumps and events.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// outputTypes returns the declared type of each output of a stage.
func (r *runner) outputTypes(s *spec.Stage) map[string]spec.Type {
	out := map[string]spec.Type{}
	if info, err := r.e.Catalog.Stage(s.Uses); err == nil {
		for _, o := range info.Outputs {
			out[o.Name] = o.Type
		}
	}
	for _, o := range s.Outputs {
		out[o.Name] = o.Type
	}
	return out
}

// artifacts hashes the content of every path output.
func (r *runner) artifacts(s *spec.Stage, outputs map[string]any) (map[string]string, error) {
	types := r.outputTypes(s)
	out := map[string]string{}
	names := make([]string, 0, len(outputs))
	for n := range outputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if types[n] != spec.TypePath {
			continue
		}
		p, ok := outputs[n].(string)
		if !ok || p == "" {
			continue
		}
		h, err := hashPath(p)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", n, err)
		}
		out[n] = h
	}
	return out, nil
}

// checkWith checks a stage's resolved `with` against the schema its plugin
// declares, before the plugin starts: validation knew a `${{ }}` value only
// by its type. Every plugin gets this check, whatever it is built with.
func (r *runner) checkWith(s *spec.Stage, ident string, with map[string]any) error {
	ws, err := r.withSchema(s, ident)
	if err != nil {
		return err
	}
	return r.resolver.CheckWith(s, ws, with)
}

// withSchema returns the compiled `with` schema of the plugin with the
// given identity, compiling it on first use.
func (r *runner) withSchema(s *spec.Stage, ident string) (*spec.WithSchema, error) {
	r.schemaMu.Lock()
	defer r.schemaMu.Unlock()
	if ws, ok := r.schemas[ident]; ok {
		return ws, nil
	}
	info, err := r.e.Catalog.Stage(s.Uses)
	if err != nil {
		return nil, err
	}
	ws, err := spec.CompileWithSchema(info)
	if err != nil {
		return nil, fmt.Errorf("stage %s declares an invalid schema for with: %w", info.Name, err)
	}
	r.schemas[ident] = ws
	return ws, nil
}

// cacheKey computes the stage's cache key from its plugin identity,
// resolved inputs, cluster, environment and the content of every path
// output of the stages it depends on, and of path params.
func (r *runner) cacheKey(s *spec.Stage, sc *spec.Scope, ident string, with map[string]any) (string, error) {
	in := cacheKeyInput{Plugin: ident, With: with, Devices: sc.Cluster.Devices, Inputs: map[string]string{}}
	if sc.Cluster.RankTable != "" {
		h, err := hashPath(sc.Cluster.RankTable)
		if err != nil {
			return "", fmt.Errorf("rank table: %w", err)
		}
		in.RankTable = h
	}
	in.Env = map[string]string{}
	for k, v := range r.p.Env {
		in.Env[k] = v
	}
	for k, v := range s.Env {
		in.Env[k] = v
	}
	r.mu.Lock()
	for a := range r.ancestors(s.ID) {
		for name, h := range r.st.Stages[a].Artifacts {
			in.Inputs[a+"."+name] = h
		}
	}
	r.mu.Unlock()
	for _, prm := range r.p.Params {
		if prm.Type != spec.TypePath {
			continue
		}
		if v, ok := sc.Params[prm.Name].(string); ok && v != "" {
			if h, err := hashPath(r.p.Resolve(v)); err == nil {
				in.Inputs["params."+prm.Name] = h
			}
		}
	}
	return cacheKey(in)
}

func (r *runner) ancestors(id string) map[string]bool {
	out := map[string]bool{}
	var walk func(string)
	walk = func(id string) {
		for _, n := range r.g.Needs[id] {
			if !out[n] {
				out[n] = true
				walk(n)
			}
		}
	}
	walk(id)
	return out
}

type cacheHit struct {
	runID     string
	outputs   map[string]any
	artifacts map[string]string
}

// lookupCache finds a stage with the same key that succeeded in an earlier
// run and whose path outputs still hold the same content.
func (r *runner) lookupCache(key string) *cacheHit {
	runs, _ := r.e.Store.List()
	for _, run := range runs {
		if run.ID == r.st.ID {
			continue
		}
		for _, ss := range run.Stages {
			if ss.CacheKey != key || (ss.Status != StatusSucceeded && ss.Status != StatusCached) {
				continue
			}
			intact := true
			for name, h := range ss.Artifacts {
				p, _ := ss.Outputs[name].(string)
				if got, err := hashPath(p); err != nil || got != h {
					intact = false
					break
				}
			}
			if intact {
				from := run.ID
				if ss.CachedFrom != "" {
					from = ss.CachedFrom
				}
				return &cacheHit{runID: from, outputs: ss.Outputs, artifacts: ss.Artifacts}
			}
		}
	}
	return nil
}
