package auto

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/npu/parallel"
)

// maxFront bounds the (time, memory) points kept per operator strategy.
// Chains of realistic networks stay far below it; past it the front is
// thinned, keeping its fastest point, so the search stays polynomial at
// the price of exactness.
const maxFront = 256

// candidate is one strategy of one operator, priced.
type candidate struct {
	layout *parallel.OpLayout
	cost   OpCost
}

// point is a partial plan ending in a given candidate: its time and
// memory so far, and where it came from.
type point struct {
	seconds   float64
	memory    int64
	prevCand  int
	prevPoint int
}

// Search finds the strategy with the least predicted step time for graph
// g on devices devices of machine m among those that fit the device
// memory, by dynamic programming along the chain (see the package
// documentation). It fails with ErrNoFit, naming the largest consumer,
// when even the strategy that needs the least memory does not fit.
func Search(g parallel.Graph, devices int, m Machine, opts ...Option) (*Plan, error) {
	p, err := newPricer(g, devices, m)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(p)
	}
	whole := sharedParams(g)
	cands := make([][]candidate, len(g.Ops))
	total := 0
	for i, o := range g.Ops {
		var refused error
		for _, st := range Candidates(o, devices, whole) {
			ol, err := o.Shard(st, devices)
			if err != nil {
				return nil, fmt.Errorf("search %s: %w", g.Model, err)
			}
			c, err := p.op(i, ol)
			if errors.Is(err, parallel.ErrOptimizerShard) {
				// npu/shard refuses this layout under the configured
				// optimizer_weight_shard_size: not a plan.
				refused = err
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("search %s: price operator %s: %w", g.Model, o.Name, err)
			}
			cands[i] = append(cands[i], candidate{layout: ol, cost: c})
		}
		if len(cands[i]) == 0 && refused != nil {
			return nil, fmt.Errorf("search %s: operator %s: every strategy on %d devices is refused: %w", g.Model, o.Name, devices, refused)
		}
		if len(cands[i]) == 0 {
			return nil, fmt.Errorf("%w: search %s: operator %s has no strategy on %d devices", ErrGraph, g.Model, o.Name, devices)
		}
		total += len(cands[i])
	}

	fronts := make([][][]point, len(g.Ops))
	fronts[0] = make([][]point, len(cands[0]))
	for c, cand := range cands[0] {
		if cand.cost.Memory <= m.Memory {
			fronts[0][c] = []point{{seconds: opSeconds(cand.cost), memory: cand.cost.Memory, prevCand: -1, prevPoint: -1}}
		}
	}
	for i := 1; i < len(g.Ops); i++ {
		fronts[i] = make([][]point, len(cands[i]))
		// Previous candidates by their fastest plan: the fast ones come
		// first and build a staircase of (memory, time) that lets the
		// search skip the redistribution of a previous candidate none of
		// whose plans could beat it even with a free redistribution.
		order := make([]int, 0, len(cands[i-1]))
		for pc, front := range fronts[i-1] {
			if len(front) > 0 {
				order = append(order, pc)
			}
		}
		fastest := func(pc int) float64 { f := fronts[i-1][pc]; return f[len(f)-1].seconds }
		slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(fastest(a), fastest(b)) })
		for c, cand := range cands[i] {
			var pts []point
			var stairs staircase
			own := opSeconds(cand.cost)
			for _, pc := range order {
				needed := false
				for _, q := range fronts[i-1][pc] {
					if mem := q.memory + cand.cost.Memory; mem <= m.Memory && !stairs.beats(mem, q.seconds+own) {
						needed = true
						break
					}
				}
				if !needed {
					continue
				}
				r, err := p.redistribute(cands[i-1][pc].layout, cand.layout)
				if err != nil {
					return nil, fmt.Errorf("search %s: %w", g.Model, err)
				}
				step := own + r.seconds
				for pp, q := range fronts[i-1][pc] {
					if mem := q.memory + cand.cost.Memory; mem <= m.Memory {
						pts = append(pts, point{seconds: q.seconds + step, memory: mem, prevCand: pc, prevPoint: pp})
						stairs.add(mem, q.seconds+step)
					}
				}
			}
			fronts[i][c] = pareto(pts)
		}
	}

	last := len(g.Ops) - 1
	bestCand, bestPoint := -1, -1
	for c, front := range fronts[last] {
		for k, q := range front {
			if bestCand < 0 || q.seconds < fronts[last][bestCand][bestPoint].seconds {
				bestCand, bestPoint = c, k
			}
		}
	}
	if bestCand < 0 {
		return nil, noFit(g, cands, devices, m)
	}
	ols := make([]*parallel.OpLayout, len(g.Ops))
	for i, c, k := last, bestCand, bestPoint; i >= 0; i-- {
		ols[i] = cands[i][c].layout
		q := fronts[i][c][k]
		c, k = q.prevCand, q.prevPoint
	}
	plan, err := p.plan(ols)
	if err != nil {
		return nil, err
	}
	plan.Candidates = total
	// Pure data parallel is among the candidates, so the search finds it
	// or better unless a front was thinned; check rather than trust.
	if dp, err := Evaluate(g, nil, devices, m); err == nil && dp.Fits() && dp.StepSeconds < plan.StepSeconds {
		dp.Candidates = total
		return dp, nil
	}
	return plan, nil
}

// staircase holds the (memory, time) points not beaten by another on both,
// sorted by memory, times falling.
type staircase []point

// beats reports whether some point needs no more memory than memory and
// less time than seconds: a plan with those figures would not be kept.
func (s staircase) beats(memory int64, seconds float64) bool {
	k, _ := slices.BinarySearchFunc(s, memory, func(p point, m int64) int { return cmpInt64(p.memory, m+1) })
	return k > 0 && s[k-1].seconds < seconds
}

func (s *staircase) add(memory int64, seconds float64) {
	if s.beats(memory, seconds) || len(*s) > 0 && s.at(memory, seconds) {
		return
	}
	st := *s
	k, _ := slices.BinarySearchFunc(st, memory, func(p point, m int64) int { return cmpInt64(p.memory, m) })
	// Drop the points the new one beats: memory at least its, time at least its.
	end := k
	for end < len(st) && st[end].seconds >= seconds {
		end++
	}
	*s = slices.Replace(st, k, end, point{memory: memory, seconds: seconds})
}

// at reports whether a point with no more memory and no more time is
// already there.
func (s staircase) at(memory int64, seconds float64) bool {
	k, _ := slices.BinarySearchFunc(s, memory, func(p point, m int64) int { return cmpInt64(p.memory, m+1) })
	return k > 0 && s[k-1].seconds <= seconds
}

// opSeconds is an operator's own time, without its input redistribution.
func opSeconds(c OpCost) float64 { return c.ComputeSeconds + c.CommSeconds }

// pareto keeps the points no other point beats on both time and memory,
// sorted by memory; past maxFront it keeps the fastest point and an even
// spread of the others.
func pareto(pts []point) []point {
	// Ties keep the order the points were made in (by previous candidate
	// and point), so the plan does not depend on the sort.
	slices.SortFunc(pts, func(a, b point) int {
		switch {
		case a.memory != b.memory:
			return cmpInt64(a.memory, b.memory)
		case a.seconds != b.seconds:
			return cmpFloat(a.seconds, b.seconds)
		case a.prevCand != b.prevCand:
			return a.prevCand - b.prevCand
		}
		return a.prevPoint - b.prevPoint
	})
	var out []point
	for _, q := range pts {
		if len(out) == 0 || q.seconds < out[len(out)-1].seconds {
			out = append(out, q)
		}
	}
	if len(out) <= maxFront {
		return out
	}
	// The last point is the fastest (times fall as memory grows).
	thin := make([]point, 0, maxFront)
	for k := range maxFront - 1 {
		thin = append(thin, out[k*(len(out)-1)/(maxFront-1)])
	}
	return append(thin, out[len(out)-1])
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// noFit explains why nothing fits: the plan of least memory (memory adds
// up over operators, so it takes each operator's least) and its largest
// consumer.
func noFit(g parallel.Graph, cands [][]candidate, devices int, m Machine) error {
	var least int64
	var big OpCost
	for _, cs := range cands {
		min := cs[0].cost
		for _, c := range cs[1:] {
			if c.cost.Memory < min.Memory {
				min = c.cost
			}
		}
		least += min.Memory
		if min.Memory > big.Memory {
			big = min
		}
	}
	return fmt.Errorf("%w: %s on %d devices needs at least %s per rank, the device has %s; the largest consumer is operator %s (%s, %s split as %s), most of it %s (%s)",
		ErrNoFit, g.Model, devices, bytesize.Format(least), bytesize.Format(m.Memory), big.Op, big.Kind, bytesize.Format(big.Memory), FormatStrategy(big.Strategy), big.Largest, bytesize.Format(big.LargestBytes))
}

// sharedParams returns the parameters used by more than one operator.
// The search keeps them whole: MindSpore requires one strategy for a
// parameter across its operators, and a whole parameter satisfies that
// without coupling the operators' choices.
func sharedParams(g parallel.Graph) map[string]bool {
	users := map[string]int{}
	for _, o := range g.Ops {
		seen := map[string]bool{}
		for _, t := range o.Params() {
			if !seen[t.Name] {
				seen[t.Name] = true
				users[t.Name]++
			}
		}
	}
	whole := map[string]bool{}
	for name, n := range users {
		if n > 1 {
			whole[name] = true
		}
	}
	return whole
}

// Candidates returns the strategies the search considers for operator o on
// devices devices: every assignment of a number of slices to each label o
// may split whose product divides the device count and where each label's
// number divides every dimension carrying it. Labels of parameters named in
// whole are not split. Every strategy is valid for [parallel.OpSpec.Shard].
func Candidates(o parallel.OpSpec, devices int, whole map[string]bool) [][][]int {
	var labels []byte
	for _, t := range o.Inputs {
		for k := range len(t.Labels) {
			if l := t.Labels[k]; strings.IndexByte(o.Splittable, l) >= 0 && !slices.Contains(labels, l) {
				labels = append(labels, l)
			}
		}
	}
	tensors := append(append(slices.Clone(o.Inputs), o.Output), o.Extra...)
	options := make([][]int, len(labels))
	for j, l := range labels {
		for d := 1; d <= devices; d++ {
			if devices%d == 0 && divides(tensors, l, d, whole) {
				options[j] = append(options[j], d)
			}
		}
	}
	var out [][][]int
	split := make(map[byte]int, len(labels))
	var walk func(j, used int)
	walk = func(j, used int) {
		if j == len(labels) {
			st := make([][]int, len(o.Inputs))
			for i, t := range o.Inputs {
				st[i] = make([]int, len(t.Shape))
				for k := range st[i] {
					st[i][k] = max(1, split[t.Labels[k]])
				}
			}
			if _, err := o.Shard(st, devices); err == nil {
				out = append(out, st)
			}
			return
		}
		for _, d := range options[j] {
			if devices%(used*d) == 0 {
				split[labels[j]] = d
				walk(j+1, used*d)
			}
		}
	}
	walk(0, 1)
	return out
}

// divides reports whether d slices of label l divide every dimension that
// carries it, and leave whole parameters whole.
func divides(tensors []parallel.TensorSpec, l byte, d int, whole map[string]bool) bool {
	for _, t := range tensors {
		for k := range len(t.Labels) {
			if t.Labels[k] != l || k >= len(t.Shape) {
				continue
			}
			if t.Shape[k]%d != 0 || d > 1 && whole[t.Name] {
				return false
			}
		}
	}
	return true
}
