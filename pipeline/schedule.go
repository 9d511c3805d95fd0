package pipeline

import (
	"context"
	"fmt"
	"strings"

	"github.com/mspipe/mspipe/spec"
)

// schedule starts stages as their needs finish, at most Jobs at once, and
// returns when nothing more can run. After a failed save of run.json
// nothing new starts; running stages are waited for. After cancellation
// running stages are cancelled and only the stages whose `if` is true with
// cancelled() (always(), cancelled()) still start, under the engine's
// cleanup context, as GitHub Actions runs them after a workflow is
// cancelled; every other pending stage stays pending, so resume runs it.
func (r *runner) schedule(ctx context.Context) {
	jobs := max(r.e.Jobs, 1)
	done := make(chan string)
	running := map[string]bool{}
	stageCtx := ctx
	for {
		if ctx.Err() != nil && stageCtx == ctx {
			cleanup, cancel := r.e.cleanupContext(ctx)
			defer cancel()
			stageCtx = cleanup
			r.mu.Lock()
			r.interrupted = true
			r.mu.Unlock()
		}
		stop := r.saveFailed() || stageCtx.Err() != nil
		var ready []string
		if !stop {
			ready = r.readyStages(running)
		}
		if len(ready) > 0 && len(running) < jobs {
			// A skip in readyStages may have unblocked more: start what
			// fits, then look again.
			for _, sid := range ready {
				if len(running) >= jobs {
					break
				}
				running[sid] = true
				go func(sid string) {
					r.runStage(stageCtx, sid)
					done <- sid
				}(sid)
			}
			continue
		}
		if len(running) == 0 {
			// Nothing runs: stop unless a skip just made a stage ready.
			if stop || (len(ready) == 0 && !r.progressPossible()) {
				return
			}
			if len(ready) == 0 {
				continue
			}
		}
		delete(running, <-done)
	}
}

// readyStages returns the pending stages, not running, that can start now.
// A stage whose `if` reads outcomes (spec.UsesStatusFuncs) is ready once
// every stage it needs has ended, however it ended, or will never run; any
// other stage once its needs succeeded. On the way it skips the stages of
// the second kind that need a skipped stage, and notes why one blocked by
// a failed or cancelled need will not run (it stays pending, so resume
// runs it).
func (r *runner) readyStages(running map[string]bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.interrupted {
		return r.cleanupStages(running)
	}
	var ready []string
	for _, sid := range r.st.Order {
		ss := r.st.Stages[sid]
		if ss.Status != StatusPending || running[sid] {
			continue
		}
		blocked, skip, wait := r.needsEnded(sid)
		switch {
		case wait:
		case spec.UsesStatusFuncs(r.p.StageByID(sid)):
			ready = append(ready, sid)
		case blocked != "":
			ss.Reason = fmt.Sprintf("not run: stage %s %s", blocked, r.outcome(blocked))
			r.blocked[sid] = true
		case skip != "":
			ss.Status, ss.Reason = StatusSkipped, fmt.Sprintf("needs stage %s, which was skipped", skip)
			r.saveLocked()
			r.log.Info().Str("event", "stage_skipped").Str("stage", sid).Str("status", string(ss.Status)).Str("reason", ss.Reason).
				Msgf("[%s] skipped: %s", sid, ss.Reason)
			r.events.Info().Str("event", "stage_skipped").Str("stage", sid).Str("reason", ss.Reason).Msg("stage skipped")
		default:
			ready = append(ready, sid)
		}
	}
	return ready
}

// cleanupStages is readyStages after the run was interrupted: the pending
// stages, not running, whose `if` reads outcomes and is true now that
// cancelled() is, once their needs have ended. Every other pending stage
// is marked as one that will not run (it stays pending, so resume runs
// it); stages are visited in dependency order, so a need that still may
// run is either running or ready, and its dependants wait for it. The
// caller holds r.mu.
func (r *runner) cleanupStages(running map[string]bool) []string {
	var ready []string
	for _, sid := range r.st.Order {
		ss := r.st.Stages[sid]
		if ss.Status != StatusPending || running[sid] || r.blocked[sid] {
			continue
		}
		s := r.p.StageByID(sid)
		if !spec.UsesStatusFuncs(s) {
			r.blocked[sid] = true
			continue
		}
		if _, _, wait := r.needsEnded(sid); wait {
			continue
		}
		sc, err := r.scope(s)
		if err == nil {
			var runIt bool
			if runIt, err = r.resolver.If(s, sc); err == nil && !runIt {
				r.blocked[sid] = true
				continue
			}
		}
		// True, or an error runStage reports as the stage's failure.
		ready = append(ready, sid)
	}
	var fresh []string
	for _, sid := range ready {
		if !r.announced[sid] {
			r.announced[sid] = true
			fresh = append(fresh, sid)
		}
	}
	if len(fresh) > 0 {
		r.log.Warn().Str("event", "run_interrupted").Strs("stages", fresh).
			Msgf("interrupted: %s still run (their if reads always() or cancelled()); interrupt again to stop them", strings.Join(fresh, ", "))
	}
	return ready
}

// needsEnded looks at the needs of stage sid: blocked names one that
// failed, was cancelled or will never run; skip one that was skipped;
// wait is true while one may still run. The caller holds r.mu.
func (r *runner) needsEnded(sid string) (blocked, skip string, wait bool) {
	for _, n := range r.g.Needs[sid] {
		switch ns := r.st.Stages[n].Status; {
		case ns == StatusSkipped:
			skip = n
		case ns.Done():
		case ns == StatusFailed || ns == StatusCancelled || r.blocked[n]:
			blocked = n
		default:
			wait = true
		}
	}
	return blocked, skip, wait
}

// outcome says how a stage ended, for reasons: its status, or "not run".
func (r *runner) outcome(sid string) string {
	if r.blocked[sid] {
		return "not run"
	}
	return string(r.st.Stages[sid].Status)
}

// progressPossible reports whether a pending stage could still become ready
// without anything running: true only when a skip was just propagated.
func (r *runner) progressPossible() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sid := range r.st.Order {
		if r.st.Stages[sid].Status != StatusPending || r.blocked[sid] {
			continue
		}
		blocked, _, wait := r.needsEnded(sid)
		if !wait && (blocked == "" || spec.UsesStatusFuncs(r.p.StageByID(sid))) {
			return true
		}
	}
	return false
}
