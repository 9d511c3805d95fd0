package pipeline

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/mspipe/mspipe/spec"
)

// PlannedStage is what `mspipe plan` shows for one stage: nothing is run.
type PlannedStage struct {
	ID     string
	Uses   string
	Needs  []string
	With   map[string]any // nil when inputs depend on outputs not known yet
	Action string         // "run", "cached", "skip", "unknown"
	Detail string         // why: cache source, false condition, unresolved input
}

// Plan works out, without running anything, the order of the stages, their
// resolved inputs where they are already known, which would come from the
// cache, and which would be skipped.
func (e *Engine) Plan(ctx context.Context, p *spec.Pipeline, params map[string]any) ([]PlannedStage, error) {
	g, err := NewGraph(p)
	if err != nil {
		return nil, err
	}
	// As Run does, so the plan's cache keys are the run's.
	if params, err = absSpec(p, params); err != nil {
		return nil, err
	}
	resolver, err := spec.NewResolver(p, e.Catalog)
	if err != nil {
		return nil, err
	}
	st := &RunState{ID: "plan", Params: params, Stages: map[string]*StageState{}, Order: g.Order}
	for _, sid := range g.Order {
		st.Stages[sid] = &StageState{Status: StatusPending}
	}
	// The plan reads the digest cache but leaves the runs directory as it was.
	r := &runner{e: e, p: p, g: g, st: st, resolver: resolver, schemas: map[string]*spec.WithSchema{},
		digests: storeDigests(e.Store, true), runs: newRunStates(e.Store)}
	var out []PlannedStage
	for _, sid := range g.Order {
		s := p.StageByID(sid)
		ps := PlannedStage{ID: sid, Uses: s.Uses, Needs: s.Needs}
		ss := st.Stages[sid]
		known, skipped := true, ""
		for a := range r.ancestors(sid) {
			switch st.Stages[a].Status {
			case StatusCached:
			case StatusSkipped:
				skipped = a
			default:
				known = false
			}
		}
		switch {
		case skipped != "" && needsSkipped(g, st, sid):
			ps.Action, ps.Detail = "skip", fmt.Sprintf("needs stage %s, which would be skipped", skipped)
			ss.Status = StatusSkipped
		case !known:
			ps.Action, ps.Detail = "run", "inputs depend on outputs of stages that will run"
			ss.Status = StatusRunning
		default:
			ps.Action, ps.Detail = r.planStage(ctx, s, ss)
			ps.With = ss.With
		}
		// Interrupted (Ctrl-C while hashing a large input): no half plan.
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		out = append(out, ps)
	}
	return out, nil
}

func needsSkipped(g *Graph, st *RunState, sid string) bool {
	for _, n := range g.Needs[sid] {
		if st.Stages[n].Status == StatusSkipped {
			return true
		}
	}
	return false
}

// planStage resolves a stage whose upstream outputs are all known.
func (r *runner) planStage(ctx context.Context, s *spec.Stage, ss *StageState) (action, detail string) {
	sc, err := r.scope(s)
	if err != nil {
		ss.Status = StatusFailed
		return "unknown", err.Error()
	}
	runIt, err := r.resolver.If(s, sc)
	if err != nil {
		ss.Status = StatusFailed
		return "unknown", err.Error()
	}
	if !runIt {
		ss.Status = StatusSkipped
		return "skip", fmt.Sprintf("if %q is false", strings.TrimSpace(s.If.Raw))
	}
	with, err := r.resolver.With(s, sc)
	if err == nil {
		with, err = r.resolver.AbsPaths(s, with)
	}
	if err != nil {
		ss.Status = StatusFailed
		return "unknown", err.Error()
	}
	ss.With = with
	ident, err := r.e.Launcher.Identity(ctx, r.p, s)
	if err != nil {
		ss.Status = StatusFailed
		return "unknown", err.Error()
	}
	if err := r.checkWith(s, ident, with); err != nil {
		ss.Status = StatusFailed
		return "unknown", err.Error()
	}
	if with, err = r.resolver.ShellData(s, sc, with); err != nil {
		ss.Status = StatusFailed
		return "unknown", err.Error()
	}
	ss.With = with
	in, err := r.cacheKeyInput(ctx, s, sc, ident, with)
	if err != nil {
		ss.Status = StatusFailed
		return "unknown", err.Error()
	}
	key, err := cacheKey(in)
	if err != nil {
		ss.Status = StatusFailed
		return "unknown", err.Error()
	}
	why := noEarlierRun
	if !r.e.NoCache {
		hit, refused := r.lookupCache(ctx, s.ID, key)
		if hit != nil {
			ss.Status, ss.Outputs, ss.Artifacts = StatusCached, hit.outputs, hit.artifacts
			return "cached", "outputs of run " + hit.runID
		}
		if refused != "" {
			why = refused
		}
	}
	ss.Status = StatusRunning
	if !r.e.NoCache && why == noEarlierRun {
		if ch := r.pluginChanged(in); ch != nil {
			return "run", fmt.Sprintf("the plugin changed since run %s, which had these inputs: %s then, %s now",
				ch.runID, shortIdentity(ch.then), shortIdentity(ident))
		}
	}
	return "run", why
}

// noEarlierRun is why a stage runs when nothing else explains it.
const noEarlierRun = "no earlier run has these inputs"

// longHex is a run of hex digits too long to read in a plan: a digest.
var longHex = regexp.MustCompile(`[0-9a-f]{16,}`)

// shortIdentity shortens the digests in a plugin identity to 12 digits,
// enough to tell two builds apart in a sentence.
func shortIdentity(ident string) string {
	return longHex.ReplaceAllStringFunc(ident, func(h string) string { return h[:12] + "…" })
}
