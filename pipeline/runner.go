package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/spec"
	"github.com/rs/zerolog"
)

// runner is the state of one execution of a run.
type runner struct {
	e        *Engine
	p        *spec.Pipeline
	g        *Graph
	dir      string
	resolver *spec.Resolver
	events   zerolog.Logger // events.jsonl of the run
	log      zerolog.Logger // the engine's logger, with the run id

	mu        sync.Mutex // guards st, saveErr and stageErrs
	st        *RunState
	saveErr   error                  // the first failed save of run.json
	stageErrs map[string]*StageError // why each failed stage failed
	blocked   map[string]bool        // pending stages that will not run: a need failed, was cancelled or is blocked
	// interrupted is set once the run's context is cancelled: cancelled()
	// is then true for every stage, and only stages whose `if` is true
	// with it still start (see schedule).
	interrupted bool
	announced   map[string]bool // stages said to run after the interruption

	schemaMu sync.Mutex
	schemas  map[string]*spec.WithSchema // compiled `with` schemas by plugin identity

	leadMu sync.Mutex
	lead   map[string]int // per stage, the lowest rank whose steps were seen: its steps are the progress

	digests *digestCache // content digests of files by their stat; nil remembers nothing
	runs    *runStates   // the store's runs, for cache lookups
}

func newRunner(e *Engine, p *spec.Pipeline, g *Graph, dir string, st *RunState, resolver *spec.Resolver) *runner {
	return &runner{
		e: e, p: p, g: g, dir: dir, st: st, resolver: resolver,
		log:       e.Log.With().Str("run", st.ID).Logger(),
		schemas:   map[string]*spec.WithSchema{},
		stageErrs: map[string]*StageError{},
		blocked:   map[string]bool{},
		announced: map[string]bool{},
		lead:      map[string]int{},
		digests:   storeDigests(e.Store, false),
		runs:      newRunStates(e.Store),
	}
}

// storeDigests returns the digest cache of a runs directory (nil without
// one); a read-only one is used but never saved.
func storeDigests(s *Store, readOnly bool) *digestCache {
	if s == nil || s.Dir == "" {
		return nil
	}
	c := newDigestCache(filepath.Join(s.Dir, digestCacheFile))
	c.readOnly = readOnly
	return c
}

// saveLocked writes run.json. A run whose state cannot be saved cannot be
// resumed or cached from, so the first failure is kept in r.saveErr: no
// new stage starts after it (running ones finish and are recorded in
// memory), the run ends failed, and Run returns the error. Later saves are
// still tried, so the file is as current as the disk allows.
func (r *runner) saveLocked() {
	r.st.Updated = r.e.now()
	err := saveState(r.dir, r.st)
	if errors.Is(err, syscall.ENOSPC) && r.releaseReserve() {
		err = saveState(r.dir, r.st)
	}
	if err == nil || r.saveErr != nil {
		return
	}
	r.saveErr = fmt.Errorf("save run state: %w", err)
	r.log.Error().Str("event", "state_not_saved").Err(err).
		Msgf("run %s: %v; no new stage starts", r.st.ID, r.saveErr)
	r.events.Error().Str("event", "state_not_saved").Err(err).Msg("run state not saved")
}

// stateReserve is the size of the file a run keeps beside run.json while
// it runs (reserveName) and deletes when the disk is full, so that run.json
// can still be saved: a run that fails because a stage filled the disk
// then records that it failed and why, instead of "running" forever. It
// holds the atomic writes of a run.json of up to half its size.
const (
	stateReserve = 1 << 20
	reserveName  = ".run.json.reserve"
)

// reserveSpace writes the reserve file of a run starting or resuming. A
// disk without room for it fails the start: a run there could not record
// its end.
func (r *runner) reserveSpace() error {
	path := filepath.Join(r.dir, reserveName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("reserve space for run.json: %w", err)
	}
	// Zeros, written (not a sparse hole), so the blocks are taken now.
	_, err = f.Write(make([]byte, stateReserve))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("reserve %s for run.json: %w", bytesize.Format(stateReserve), err)
	}
	return nil
}

// releaseReserve deletes the reserve file, reporting whether there was one
// to free.
func (r *runner) releaseReserve() bool {
	return os.Remove(filepath.Join(r.dir, reserveName)) == nil
}

// saveFailed reports whether run.json could not be written.
func (r *runner) saveFailed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.saveErr != nil
}

// fail ends a stage as failed because of err, in attempt (0: before its
// plugin started). run.json keeps err's text as the stage's reason.
func (r *runner) fail(sid string, attempt int, err error, started time.Time) {
	se := &StageError{Stage: sid, Attempt: attempt, Err: err}
	r.mu.Lock()
	r.stageErrs[sid] = se
	r.mu.Unlock()
	r.finish(sid, StatusFailed, err.Error(), started)
}

// finish takes a stage to a final state, saves it and tells of it.
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
	r.saveLocked()
	ev := r.events.Info()
	if status == StatusFailed {
		ev = r.events.Error()
	}
	ev.Str("event", "stage_"+string(status)).Str("stage", sid).Str("reason", reason).Float64("seconds", ss.Seconds).Msg("stage " + string(status))
	if r.e.Progress != nil {
		r.e.Progress.Ended(sid, status)
	}
	line := r.log.Info()
	if status == StatusFailed {
		line = r.log.Error()
	}
	line = line.Str("event", "stage_"+string(status)).Str("stage", sid).Str("status", string(status)).Float64("seconds", ss.Seconds)
	if reason != "" {
		line = line.Str("reason", reason)
	}
	switch status {
	case StatusFailed:
		// A stage refused before its plugin started (bad inputs) has no log.
		if log := filepath.Join(r.dir, ss.Log); ss.Log != "" && fileExists(log) {
			line.Str("log", log).Msgf("[%s] failed after %s: %s (log: %s)", sid, dur(ss.Seconds), reason, log)
		} else {
			line.Msgf("[%s] failed after %s: %s", sid, dur(ss.Seconds), reason)
		}
	case StatusCancelled:
		line.Msgf("[%s] cancelled after %s", sid, dur(ss.Seconds))
	case StatusSkipped:
		line.Msgf("[%s] skipped: %s", sid, reason)
	case StatusSucceeded:
		line.Msgf("[%s] succeeded in %s", sid, dur(ss.Seconds))
	}
}

func dur(seconds float64) time.Duration {
	return time.Duration(seconds * float64(time.Second)).Round(time.Millisecond)
}
