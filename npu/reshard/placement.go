package reshard

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/npu/parallel"
)

// Placement is where one logical tensor lives: its whole shape and, for
// each rank in rank order, the box that rank holds. Nil Boxes means every
// rank holds the whole tensor.
//
// Ranks, when not nil, lists (ascending) the only ranks whose files hold
// the tensor: the ranks of the pipeline stage(s) the parameter belongs
// to. Boxes still has one entry per rank of the set; the entries of the
// other ranks are ignored. With nil Boxes, each listed rank holds the
// whole tensor.
type Placement struct {
	Shape []int
	Boxes []parallel.Box
	Ranks []int
}

// holds reports whether rank r holds the tensor.
func (p Placement) holds(r int) bool {
	if p.Ranks == nil {
		return true
	}
	_, found := slices.BinarySearch(p.Ranks, r)
	return found
}

// holders returns the ranks of a set of n ranks that hold the tensor.
func (p Placement) holders(n int) []int {
	if p.Ranks != nil {
		return p.Ranks
	}
	all := make([]int, n)
	for r := range all {
		all[r] = r
	}
	return all
}

// checkRanks checks that Ranks, when given, lists at least one rank of
// the n, ascending, each once.
func (p Placement) checkRanks(n int) error {
	if p.Ranks == nil {
		return nil
	}
	if len(p.Ranks) == 0 {
		return fmt.Errorf("placement lists no rank that holds the tensor: %w", ErrPlacement)
	}
	for i, r := range p.Ranks {
		if r < 0 || r >= n || i > 0 && r <= p.Ranks[i-1] {
			return fmt.Errorf("placement ranks %v: want ascending ranks of 0 to %d, each once: %w", clip(p.Ranks, 16), n-1, ErrPlacement)
		}
	}
	return nil
}

// Source is a checkpoint set to read: one file per rank, in rank order, and
// the placements of the tensors that are not replicated.
type Source struct {
	Files      []string
	Placements map[string]Placement // by tensor name; absent = replicated
}

// Target is the checkpoint set to write.
type Target struct {
	Ranks      int
	Placements map[string]Placement // by tensor name; absent = replicated
	// Files names each rank's output file relative to the output directory;
	// empty means rank_{r}.ckpt.
	Files []string
	// Strategy, when set, names the target's strategy file, already in the
	// output directory (relative to it): the manifest records its size and
	// content hash, and Verify checks them.
	Strategy string
}

// PerRankStatistic reports whether a replicated tensor may hold different
// values on different ranks: BatchNorm's moving statistics, which data
// parallelism keeps per device (Options.ReplicatedRule chooses the value).
// Every other replicated tensor must be equal on all ranks.
func PerRankStatistic(name string) bool {
	for _, suffix := range []string{"moving_mean", "moving_variance", "moving_var"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// MaxRanks caps a target's ranks. Every target rank is one output file
// with its own write buffer and its own box per split tensor, so the work
// of planning alone grows with it; 4096 is above any cluster a rank table
// describes here (HCCL's 8 devices per server times 512 servers).
const MaxRanks = 4096

// CheckRanks refuses a target rank count outside 1..MaxRanks.
func CheckRanks(n int) error {
	if n < 1 || n > MaxRanks {
		return fmt.Errorf("target of %d ranks: want 1 to %d (each target rank is an output file to plan and write; %d is 512 servers of 8 devices): %w", n, MaxRanks, MaxRanks, ErrPlacement)
	}
	return nil
}

// Replicated-tensor rules (Options.ReplicatedRule).
const (
	RuleRank0 = "rank0" // rank 0's copy, as MindSpore users do
	RuleMean  = "mean"  // the element-wise mean of all ranks' copies
)

// optimizerPrefixes name optimizer state that shares its parameter's layout.
var optimizerPrefixes = []string{"moments.", "adam_m.", "adam_v.", "accum."}

// placementOf returns the placement of name, or of the parameter it is
// optimizer state of; the zero Placement (replicated on every rank) when
// there is none.
func placementOf(placements map[string]Placement, name string) Placement {
	if p, ok := placements[name]; ok {
		return p
	}
	for _, prefix := range optimizerPrefixes {
		if param, found := strings.CutPrefix(name, prefix); found {
			if p, ok := placements[param]; ok {
				return p
			}
		}
	}
	return Placement{}
}

// lookupPlacement is placementOf; ok is false for a replicated tensor
// (which may still be held by some ranks only: see Placement.Ranks).
func lookupPlacement(placements map[string]Placement, name string) (Placement, bool) {
	p := placementOf(placements, name)
	return p, p.Boxes != nil
}

// TargetForDevices is the target for m devices when no target strategy is
// given (see "Target rule" in the package documentation). The placements
// are the boxes of the layouts LayoutsForDevices returns.
func TargetForDevices(src Source, m int) Target {
	t := Target{Ranks: m, Placements: make(map[string]Placement)}
	for name, l := range LayoutsForDevices(src, m) {
		boxes := make([]parallel.Box, m)
		for r := range boxes {
			b, err := l.Box(r)
			if err != nil {
				panic(fmt.Sprintf("reshard: layout %+v of the target rule: %v", l, err)) // the rule only makes valid layouts
			}
			boxes[r] = b
		}
		t.Placements[name] = Placement{Shape: slices.Clone(l.Shape), Boxes: boxes}
	}
	return t
}

// LayoutsForDevices returns the layouts of the target rule for m devices,
// for the tensors it splits: device matrix [m], the source's first split
// dimension mapped to it. A tensor absent from the result is replicated;
// this is what a target strategy file for the output should say.
func LayoutsForDevices(src Source, m int) map[string]parallel.Layout {
	layouts := make(map[string]parallel.Layout)
	if m < 1 {
		return layouts
	}
	for name, p := range src.Placements {
		if p.Boxes == nil {
			continue
		}
		dim := firstSplitDim(p)
		if dim < 0 || p.Shape[dim]%m != 0 {
			continue
		}
		tensorMap := make([]int, len(p.Shape))
		for k := range tensorMap {
			tensorMap[k] = -1
		}
		tensorMap[dim] = 0
		l := parallel.Layout{DeviceMatrix: []int{m}, TensorMap: tensorMap, Shape: slices.Clone(p.Shape)}
		if l.Validate() != nil {
			continue // a bad shape; Plan and Run say what is wrong with it
		}
		layouts[name] = l
	}
	return layouts
}

// firstSplitDim returns the first dimension some box does not span whole,
// or -1.
func firstSplitDim(p Placement) int {
	for k, n := range p.Shape {
		for _, b := range p.Boxes {
			if k < len(b.Shape) && b.Shape[k] != n {
				return k
			}
		}
	}
	return -1
}

// wholeBox is the box of a whole tensor of the given shape.
func wholeBox(shape []int) parallel.Box {
	return parallel.Box{Offset: make([]int, len(shape)), Shape: slices.Clone(shape)}
}

func volume(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

func sameBox(a, b parallel.Box) bool {
	return slices.Equal(a.Offset, b.Offset) && slices.Equal(a.Shape, b.Shape)
}

// checkTiling checks that the boxes of ranks (one box per rank of the set;
// nil ranks means all of them) tile a tensor of shape: inside it,
// overlapping only when identical, covering every element. It returns for
// every distinct box the lowest rank holding it, in rank order.
func checkTiling(shape []int, boxes []parallel.Box, ranks []int) (distinct []int, err error) {
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("shape %v has a negative dimension: %w", shape, ErrPlacement)
		}
	}
	if ranks == nil {
		ranks = Placement{}.holders(len(boxes))
	}
	var covered int64
	for _, r := range ranks {
		b := boxes[r]
		if len(b.Offset) != len(shape) || len(b.Shape) != len(shape) {
			return nil, fmt.Errorf("rank %d: box offset %v shape %v does not have the %d dimensions of %v: %w", r, b.Offset, b.Shape, len(shape), shape, ErrPlacement)
		}
		for k := range shape {
			if b.Offset[k] < 0 || b.Shape[k] < 0 || b.Offset[k]+b.Shape[k] > shape[k] {
				return nil, fmt.Errorf("rank %d: box offset %v shape %v is outside the tensor's shape %v: %w", r, b.Offset, b.Shape, shape, ErrPlacement)
			}
		}
		dup := false
		for _, q := range distinct {
			if sameBox(boxes[q], b) {
				dup = true
				break
			}
			if _, overlap := boxes[q].Intersect(b); overlap {
				return nil, fmt.Errorf("rank %d's box offset %v shape %v overlaps rank %d's offset %v shape %v: %w", r, b.Offset, b.Shape, q, boxes[q].Offset, boxes[q].Shape, ErrPlacement)
			}
		}
		if !dup {
			distinct = append(distinct, r)
			covered += volume(b.Shape)
		}
	}
	if total := volume(shape); covered != total {
		return nil, fmt.Errorf("the boxes of %d ranks cover %d of the %d elements of %v (a hole): %w", len(ranks), covered, total, shape, ErrPlacement)
	}
	return distinct, nil
}
