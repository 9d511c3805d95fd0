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
	"time"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
)

// runStage takes one stage from pending to a final state: its `if`, its
// resolved `with` checked against the plugin's schema, the cache, then its
// attempts.
func (r *runner) runStage(ctx context.Context, sid string) {
	s := r.p.StageByID(sid)
	r.mu.Lock()
	sc, err := r.scope(s)
	r.mu.Unlock()
	if err != nil {
		r.fail(sid, 0, err, time.Time{})
		return
	}
	runIt, err := r.resolver.If(s, sc)
	if err != nil {
		r.fail(sid, 0, err, time.Time{})
		return
	}
	if !runIt {
		r.finish(sid, StatusSkipped, fmt.Sprintf("if %q was false", strings.TrimSpace(s.If.Raw)), time.Time{})
		return
	}
	with, err := r.resolver.With(s, sc)
	if err == nil {
		with, err = r.resolver.AbsPaths(s, with)
	}
	if err != nil {
		r.fail(sid, 0, err, time.Time{})
		return
	}
	r.mu.Lock()
	ss := r.st.Stages[sid]
	ss.With = with
	r.mu.Unlock()
	ident, err := r.e.Launcher.Identity(ctx, r.p, s)
	if err != nil {
		r.fail(sid, 0, err, time.Time{})
		return
	}
	if err := r.checkWith(s, ident, with); err != nil {
		r.fail(sid, 0, err, time.Time{})
		return
	}
	if with, err = r.resolver.ShellData(s, sc, with); err != nil {
		r.fail(sid, 0, err, time.Time{})
		return
	}
	r.mu.Lock()
	ss.With = with
	r.mu.Unlock()
	key, err := r.cacheKey(ctx, s, sc, ident, with)
	if err != nil {
		r.fail(sid, 0, err, time.Time{})
		return
	}
	r.mu.Lock()
	ss.CacheKey, ss.Plugin = key, ident
	r.mu.Unlock()
	if !r.e.NoCache {
		hit, refused := r.lookupCache(ctx, sid, key)
		if hit == nil && refused != "" {
			r.log.Info().Str("event", "cache_refused").Str("stage", sid).Msgf("[%s] not cached: %s", sid, refused)
		}
		if hit != nil {
			r.mu.Lock()
			ss.Status, ss.Outputs, ss.Artifacts, ss.CachedFrom = StatusCached, hit.outputs, hit.artifacts, hit.runID
			ss.Reason = ""
			r.saveLocked()
			r.events.Info().Str("event", "stage_cached").Str("stage", sid).Str("from", hit.runID).Msg("stage cached")
			r.log.Info().Str("event", "stage_cached").Str("stage", sid).Str("status", string(ss.Status)).Str("from", hit.runID).
				Msgf("[%s] cached: outputs of run %s", sid, hit.runID)
			r.mu.Unlock()
			if r.e.Progress != nil {
				r.e.Progress.Ended(sid, StatusCached) // ends the bar of the outputs' hashing, if any
			}
			return
		}
	}
	r.attempts(ctx, s, sc, with)
}

// attempts runs the stage up to its retry limit, waiting the backoff
// (doubled each time) between attempts. A stage that fails every attempt
// fails with the error of the last one.
func (r *runner) attempts(ctx context.Context, s *spec.Stage, sc *spec.Scope, with map[string]any) {
	sid := s.ID
	// A link planted at stages/<id> would take every write of the stage
	// out of the run directory.
	workDir, err := userfile.Within(r.dir, filepath.Join("stages", sid))
	if err != nil {
		r.fail(sid, 0, fmt.Errorf("stages.%s: work dir: %w", sid, err), time.Time{})
		return
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		r.fail(sid, 0, fmt.Errorf("create work dir: %w", err), time.Time{})
		return
	}
	stageLog, err := openStageLog(filepath.Join(workDir, "stage.log"), MaxStageLogSize)
	if err != nil {
		r.fail(sid, 0, fmt.Errorf("open stage log: %w", err), time.Time{})
		return
	}
	defer stageLog.Close()

	started := r.e.now()
	r.mu.Lock()
	ss := r.st.Stages[sid]
	ss.Status, ss.Started, ss.Reason = StatusRunning, &started, ""
	ss.Attempts++ // the first attempt is recorded with the start: one save, not two
	r.saveLocked()
	r.events.Info().Str("event", "stage_started").Str("stage", sid).Str("uses", s.Uses).Msg("stage started")
	r.log.Info().Str("event", "stage_started").Str("stage", sid).Str("status", string(ss.Status)).Str("uses", s.Uses).
		Msgf("[%s] started (%s)", sid, s.Uses)
	r.mu.Unlock()

	backoff := s.Retry.Backoff
	var lastErr error
	attempt := 0
	for attempt < max(s.Retry.MaxAttempts, 1) {
		attempt++
		if attempt > 1 {
			r.mu.Lock()
			ss.Attempts++
			r.saveLocked()
			r.mu.Unlock()
			r.log.Warn().Str("event", "stage_retry").Str("stage", sid).Int("attempt", attempt).Int("max_attempts", s.Retry.MaxAttempts).
				Dur("backoff", backoff).AnErr("previous", lastErr).
				Msgf("[%s] attempt %d of %d after %s: %v", sid, attempt, s.Retry.MaxAttempts, backoff, lastErr)
			r.e.sleep(ctx, backoff)
			backoff *= 2
		}
		if ctx.Err() != nil {
			r.finish(sid, StatusCancelled, "interrupted", started)
			return
		}
		fmt.Fprintf(stageLog, "--- attempt %d started %s\n", attempt, r.e.now().Format(time.RFC3339))
		outputs, err := r.attempt(ctx, s, sc, with, workDir, attempt, stageLog)
		if err == nil {
			r.absOutputs(s, outputs, workDir)
			artifacts, err := r.artifacts(ctx, s, outputs)
			if err != nil {
				r.fail(sid, attempt, err, started)
				return
			}
			r.mu.Lock()
			ss.Outputs, ss.Artifacts = outputs, artifacts
			r.mu.Unlock()
			r.finish(sid, StatusSucceeded, "", started)
			return
		}
		fmt.Fprintf(stageLog, "--- attempt %d failed: %v\n", attempt, err)
		if ctx.Err() != nil {
			r.finish(sid, StatusCancelled, "interrupted", started)
			return
		}
		lastErr = err
	}
	r.fail(sid, attempt, lastErr, started)
}

// attempt launches the plugin once and runs the stage with its timeout.
func (r *runner) attempt(ctx context.Context, s *spec.Stage, sc *spec.Scope, with map[string]any, workDir string, attempt int, log io.Writer) (map[string]any, error) {
	runCtx, deadline := ctx, time.Time{}
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		deadline = r.e.now().Add(s.Timeout)
		runCtx, cancel = context.WithTimeout(ctx, s.Timeout)
		defer cancel()
	}
	proc, err := r.e.Launcher.Launch(runCtx, r.p, s, log)
	if err != nil {
		return nil, r.timeoutOr(ctx, runCtx, deadline, s, err)
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
		return nil, r.timeoutOr(ctx, runCtx, deadline, s, err)
	}
	return r.checkOutputs(s, outputs)
}

// timeoutOr returns ErrTimeout when the stage's own deadline (not the
// caller's context) ended the attempt, else err. The deadline is compared
// with the clock, not only read from runCtx.Err(): the plugin's side of the
// stream has the same deadline and may reset the stream ("RST_STREAM …
// CANCEL") before the host's context timer has fired, and that error must
// still read as a timeout.
func (r *runner) timeoutOr(ctx, runCtx context.Context, deadline time.Time, s *spec.Stage, err error) error {
	if ctx.Err() != nil || deadline.IsZero() {
		return err
	}
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) || !r.e.now().Before(deadline) {
		return fmt.Errorf("%w after %s", ErrTimeout, s.Timeout)
	}
	return err
}

// checkOutputs converts outputs the spec declares (for exec and custom
// plugins) to their types; a declared output that is missing is an error.
func (r *runner) checkOutputs(s *spec.Stage, outputs map[string]any) (map[string]any, error) {
	if outputs == nil {
		outputs = map[string]any{}
	}
	// Also here, not only in the plugin host: a launcher of another kind
	// must not make run.json too large to read back either.
	if err := plugins.CheckOutputSize(outputs); err != nil {
		return nil, err
	}
	for _, o := range s.Outputs {
		v, ok := outputs[o.Name]
		if !ok {
			return nil, fmt.Errorf("the stage did not produce output %q, which the spec declares", o.Name)
		}
		c, err := spec.ConvertValue(v, o.Type)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w, got %v", o.Name, err, v)
		}
		outputs[o.Name] = c
	}
	return outputs, nil
}

// scope is what expressions of stage s see now. The caller holds r.mu.
func (r *runner) scope(s *spec.Stage) (*spec.Scope, error) {
	sc := &spec.Scope{Params: r.st.Params, Stages: map[string]spec.StageValue{}, Env: stageEnv(r.e.Env, r.p, s),
		Run: spec.RunValue{ID: r.st.ID, Name: r.p.Name, Dir: r.dir}}
	for sid, ss := range r.st.Stages {
		status := ss.Status
		if status == StatusCached {
			status = StatusSucceeded // the outcome, not where the outputs came from
		}
		sc.Stages[sid] = spec.StageValue{Status: string(status), Outputs: ss.Outputs}
	}
	for a := range r.ancestors(s.ID) {
		switch r.st.Stages[a].Status {
		case StatusFailed:
			sc.Failed = true
		case StatusCancelled:
			sc.Cancelled = true
		}
	}
	if r.interrupted {
		sc.Cancelled = true // the whole run was cancelled, as in GitHub Actions
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

// stageEnv is what `${{ env.NAME }}` reads in stage s: the stage's env
// over the pipeline's over the process's (s may be nil: pipeline level).
func stageEnv(process map[string]string, p *spec.Pipeline, s *spec.Stage) map[string]string {
	env := make(map[string]string, len(process)+len(p.Env))
	for k, v := range process {
		env[k] = v
	}
	for k, v := range p.Env {
		env[k] = v
	}
	if s != nil {
		for k, v := range s.Env {
			env[k] = v
		}
	}
	return env
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

// absOutputs makes every relative path output absolute against the
// stage's work directory, in place: what a stage reports is relative to
// where it ran, and later stages, the cache and resume must not depend
// on mspipe's own working directory.
func (r *runner) absOutputs(s *spec.Stage, outputs map[string]any, workDir string) {
	for n, t := range r.outputTypes(s) {
		if p, ok := outputs[n].(string); ok && t == spec.TypePath && p != "" && !filepath.IsAbs(p) {
			outputs[n] = filepath.Join(workDir, p)
		}
	}
}

// artifacts hashes the content of every path output.
func (r *runner) artifacts(ctx context.Context, s *spec.Stage, outputs map[string]any) (map[string]string, error) {
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
		h, err := r.digest(ctx, s.ID, "output "+n, p)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", n, err)
		}
		out[n] = h
	}
	return out, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
