package reshard

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/npu/parallel"
)

// What DevicesTarget does with a split tensor whose split dimension does
// not divide into the target's device count.
const (
	// IndivisibleRefuse refuses the reshard, saying which device counts
	// divide and what the other rules would do (the default).
	IndivisibleRefuse = "refuse"
	// IndivisibleSplit cuts the dimension unevenly as numpy.array_split
	// does: the first n%M ranks get one row more, ranks past the rows get
	// an empty slice. The manifest records the boxes; a MindSpore strategy
	// file cannot describe them.
	IndivisibleSplit = "split"
	// IndivisibleReplicate writes the tensor whole to every rank (M copies).
	IndivisibleReplicate = "replicate"
)

// ErrIndivisible is wrapped when DevicesTarget refuses a tensor under
// IndivisibleRefuse.
var ErrIndivisible = errors.New("split dimension does not divide into the device count")

// DevicesTarget is the target for "reshard to m devices" without a target
// strategy: TargetForDevices's rule for the tensors whose split dimension
// divides by m, and the indivisible rule for the others (see the constants;
// "" means IndivisibleRefuse). uneven lists the tensors cut unevenly.
func DevicesTarget(src Source, m int, indivisible string) (t Target, uneven []string, err error) {
	if m < 1 {
		return Target{}, nil, fmt.Errorf("%d devices: want at least 1", m)
	}
	t = TargetForDevices(src, m)
	var bad []string // split tensors the even rule leaves whole on every rank
	var sizes []int
	for name, p := range src.Placements {
		if p.Boxes == nil {
			continue
		}
		if _, even := t.Placements[name]; even {
			continue
		}
		dim := firstSplitDim(p)
		if dim < 0 {
			continue // the source's boxes are all whole: replicated anyway
		}
		bad = append(bad, name)
		sizes = append(sizes, p.Shape[dim])
	}
	if len(bad) == 0 {
		return t, nil, nil
	}
	sort.Strings(bad)
	switch indivisible {
	case IndivisibleReplicate:
		return t, nil, nil
	case IndivisibleSplit:
		for _, name := range bad {
			p := src.Placements[name]
			t.Placements[name] = Placement{Shape: slices.Clone(p.Shape), Boxes: arraySplit(p.Shape, firstSplitDim(p), m)}
		}
		return t, bad, nil
	case "", IndivisibleRefuse:
		p := src.Placements[bad[0]]
		dim := firstSplitDim(p)
		n := p.Shape[dim]
		boxes := arraySplit(p.Shape, dim, m)
		more := ""
		if len(bad) > 1 {
			more = fmt.Sprintf(" (and %d more: %s)", len(bad)-1, strings.Join(clip(bad[1:], 4), ", "))
		}
		return Target{}, nil, fmt.Errorf("tensor %q %v: dimension %d (%d) does not split into %d equal slices%s: %w; "+
			"use a device count that divides every such dimension (%s), or set indivisible to %q (uneven slices of %d to %d rows, as numpy.array_split; the manifest records them, a MindSpore strategy file cannot) or %q (the tensor whole on every rank, %d copies)",
			bad[0], p.Shape, dim, n, m, more, ErrIndivisible,
			joinInts(commonDivisors(sizes)), IndivisibleSplit, boxes[len(boxes)-1].Shape[dim], boxes[0].Shape[dim], IndivisibleReplicate, m)
	default:
		return Target{}, nil, fmt.Errorf("indivisible rule %q: want %q, %q or %q", indivisible, IndivisibleRefuse, IndivisibleSplit, IndivisibleReplicate)
	}
}

// arraySplit cuts dimension dim of shape into m boxes as numpy.array_split
// cuts n rows: the first n%m get n/m+1 rows, the rest n/m (possibly 0).
func arraySplit(shape []int, dim, m int) []parallel.Box {
	n := shape[dim]
	boxes := make([]parallel.Box, m)
	off := 0
	for r := range boxes {
		rows := n / m
		if r < n%m {
			rows++
		}
		b := wholeBox(shape)
		b.Offset[dim], b.Shape[dim] = off, rows
		boxes[r] = b
		off += rows
	}
	return boxes
}

// commonDivisors returns the numbers above 1 that divide every size.
func commonDivisors(sizes []int) []int {
	g := 0
	for _, s := range sizes {
		for b := s; b != 0; {
			g, b = b, g%b
		}
	}
	var out []int
	for d := 2; d <= g; d++ {
		if g%d == 0 {
			out = append(out, d)
		}
	}
	return out
}

func joinInts(xs []int) string {
	if len(xs) == 0 {
		return "only 1 does"
	}
	s := make([]string, len(xs))
	for i, x := range clip(xs, 12) {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s[:min(len(xs), 12)], ", ")
}

func clip[T any](xs []T, n int) []T {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}
