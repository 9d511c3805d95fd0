package shard

import (
	"context"
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// optShard is one trainable parameter whose update is split across the
// ranks that hold the same slice of it (MindSpore's parallel optimizer):
// this rank updates, keeps the moment of, and checkpoints only piece, a
// part of its slice along dimension 0, and the pieces of the ranks of its
// gather group are put back together before every forward.
type optShard struct {
	full  *nn.Param // the layer's parameter: this rank's whole slice
	piece *nn.Param // a view of full's rows [lo, hi) (values and gradient)
	box   parallel.Box
	// layout is the parameter's strategy file entry, with
	// opt_weight_shard_step and opt_weight_shard_size.
	layout parallel.TensorLayout
	// group is the ranks whose pieces make up this rank's slice, sorted;
	// spans[i] the flat range of the slice group[i] holds.
	group []int
	spans [][2]int
	// scatter is set when the gradient is summed over group itself: the
	// rank then receives the other ranks' contributions to its piece only
	// (a ReduceScatter) instead of the whole gradient being all-reduced.
	scatter bool
}

// optSplit is how the parallel optimizer splits the update of one
// parameter, seen from one rank.
type optSplit struct {
	// layout is the parameter's strategy file entry, with
	// opt_weight_shard_step and opt_weight_shard_size.
	layout parallel.TensorLayout
	piece  parallel.Box // the rank's piece of the whole tensor
	// group is the ranks whose pieces make up the rank's slice, sorted;
	// spans[i] the flat range of the slice group[i] holds.
	group []int
	spans [][2]int
}

// splitOptimizer returns how the parallel optimizer splits the update of
// parameter t, laid out by l, over the ranks that repeat rank's slice of
// it, or nil when t stays whole: the optimizer is off, or
// parallel.OptimizerPieces (MindSpore's rule, which the cost model prices
// too) says so. New builds each rank's pieces and LayoutOf writes the
// strategy file entries from it, so a checkpoint resharded to LayoutOf's
// file holds exactly the pieces the ranks load.
func (c *Config) splitOptimizer(t parallel.TensorSpec, l parallel.Layout, rank int) (*optSplit, error) {
	if !c.ParallelOptimizer || c.Mode == parallel.HybridParallel {
		return nil, nil
	}
	mine, err := l.Box(rank)
	if err != nil {
		return nil, err
	}
	boxes := make([]parallel.Box, l.Devices())
	var repeats []int // the ranks holding rank's slice, in order
	for r := range boxes {
		if boxes[r], err = l.Box(r); err != nil {
			return nil, err
		}
		if slices.Equal(boxes[r].Offset, mine.Offset) {
			repeats = append(repeats, r)
		}
	}
	slice := mine.Shape
	size, err := parallel.OptimizerPieces(t, slice, len(repeats), c.OptimizerShardSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if size == 1 {
		return nil, nil
	}
	tl := parallel.TensorLayoutOf(l)
	tl.OptWeightShardStep, tl.OptWeightShardSize = l.Devices()/len(repeats), size
	pieces, err := tl.Boxes(l.Shape)
	if err != nil {
		return nil, fmt.Errorf("parameter %s: optimizer shard layout: %w", t.Name, err)
	}
	// The ranks that share a slice form groups of size consecutive ones,
	// each holding the whole slice between them; each piece must lie in
	// its rank's slice (the strategy file's numbering of the pieces and
	// the engine's placement of the slices must agree).
	at := slices.Index(repeats, rank)
	s := &optSplit{layout: tl, piece: pieces[rank], group: repeats[at/size*size : at/size*size+size]}
	rowLen := volume(slice) / slice[0]
	for _, r := range s.group {
		pc := pieces[r]
		if !inside(pc, boxes[r]) {
			return nil, fmt.Errorf("parameter %s: rank %d's optimizer piece %v+%v lies outside its slice %v+%v", t.Name, r, pc.Offset, pc.Shape, boxes[r].Offset, boxes[r].Shape)
		}
		lo := (pc.Offset[0] - boxes[r].Offset[0]) * rowLen
		s.spans = append(s.spans, [2]int{lo, lo + volume(pc.Shape)})
	}
	if err := checkTiling(s.spans, volume(slice)); err != nil {
		return nil, fmt.Errorf("parameter %s: optimizer pieces of ranks %v: %w", t.Name, s.group, err)
	}
	return s, nil
}

// shardOptimizer splits the update of p, specified by t and laid out by
// l, as splitOptimizer says: this rank's piece becomes a view of p's
// rows. It returns nil for a parameter that stays whole.
func (n *Net) shardOptimizer(p *nn.Param, t parallel.TensorSpec, l parallel.Layout) (*optShard, error) {
	split, err := n.cfg.splitOptimizer(t, l, n.cfg.Rank)
	if err != nil || split == nil {
		return nil, err
	}
	s := &optShard{full: p, layout: split.layout, group: split.group, spans: split.spans, box: split.piece}
	span := s.spans[slices.Index(s.group, n.cfg.Rank)]
	value, err := tensor.FromSlice(p.Value.Data()[span[0]:span[1]:span[1]], s.box.Shape...)
	if err != nil {
		return nil, err
	}
	grad, err := tensor.FromSlice(p.Grad.Data()[span[0]:span[1]:span[1]], s.box.Shape...)
	if err != nil {
		return nil, err
	}
	s.piece = &nn.Param{Name: p.Name, Value: value, Grad: grad, Trainable: true}
	return s, nil
}

// inside reports whether box a lies within box b.
func inside(a, b parallel.Box) bool {
	if len(a.Offset) != len(b.Offset) {
		return false
	}
	for k := range a.Offset {
		if a.Offset[k] < b.Offset[k] || a.Offset[k]+a.Shape[k] > b.Offset[k]+b.Shape[k] {
			return false
		}
	}
	return true
}

// checkTiling checks that spans cover [0, total) without overlap.
func checkTiling(spans [][2]int, total int) error {
	sorted := slices.Clone(spans)
	slices.SortFunc(sorted, func(a, b [2]int) int { return a[0] - b[0] })
	next := 0
	for _, s := range sorted {
		if s[0] != next {
			return fmt.Errorf("%w: pieces %v do not tile a slice of %d values", ErrConfig, spans, total)
		}
		next = s[1]
	}
	if next != total {
		return fmt.Errorf("%w: pieces %v do not tile a slice of %d values", ErrConfig, spans, total)
	}
	return nil
}

// gatherWeights puts every optimizer-sharded parameter's slice back
// together from the pieces its group's ranks updated (MindSpore's
// AllGather before the forward): one Exchange, every rank calls it.
func (n *Net) gatherWeights(ctx context.Context) error {
	if len(n.optShards) == 0 || n.cfg.Devices == 1 {
		return nil
	}
	d, rank := n.cfg.Devices, n.cfg.Rank
	send, recv := n.gatherSend, n.gatherRecv
	for r := range d {
		send[r], recv[r] = send[r][:0], recv[r][:0]
	}
	for _, s := range n.optShards {
		piece := s.piece.Value.Data()
		for i, r := range s.group {
			if r == rank {
				continue
			}
			send[r] = append(send[r], piece...)
			recv[r] = append(recv[r], make([]float32, s.spans[i][1]-s.spans[i][0])...)
		}
	}
	if err := n.cfg.Comm.Exchange(ctx, send, recv); err != nil {
		return fmt.Errorf("optimizer parallel: all-gather of the updated weights: %w", err)
	}
	off := make([]int, d)
	for _, s := range n.optShards {
		w := s.full.Value.Data()
		for i, r := range s.group {
			if r == rank {
				continue
			}
			sp := s.spans[i]
			off[r] += copy(w[sp[0]:sp[1]], recv[r][off[r]:])
		}
	}
	return nil
}

// scatterLen returns the receive buffer reduceScatter needs: the other
// ranks' contributions to this rank's piece of the largest gradient it
// reduce-scatters.
func (n *Net) scatterLen() int {
	most := 0
	for _, s := range n.optShards {
		if s.scatter {
			most = max(most, (len(s.group)-1)*s.piece.Value.Len())
		}
	}
	return most
}

// reduceScatter sums, for every parameter whose gradient is reduced over
// the ranks that split its update, the contributions of those ranks to
// this rank's piece, in group order as GroupAllReduce adds them (so the
// bits are the same), leaving the sum in the piece's gradient; the rest
// of the slice's gradient keeps this rank's own values, which nothing
// reads. One Exchange per parameter: each rank sends every other member
// of its group that member's rows of its gradient.
func (n *Net) reduceScatter(ctx context.Context) error {
	if n.cfg.Devices == 1 {
		return nil
	}
	rank := n.cfg.Rank
	// Views of the gradients and of scatterBuf: not gatherWeights's
	// buffers, which it appends to.
	if n.scatterSend == nil {
		n.scatterSend, n.scatterRecv = make([][]float32, n.cfg.Devices), make([][]float32, n.cfg.Devices)
	}
	send, recv := n.scatterSend, n.scatterRecv
	for _, s := range n.optShards {
		if !s.scatter {
			continue
		}
		if len(n.scatterBuf) < n.scatterLen() {
			n.scatterBuf = make([]float32, n.scatterLen())
		}
		for r := range send {
			send[r], recv[r] = nil, nil
		}
		grad := s.full.Grad.Data()
		piece := s.piece.Grad.Data()
		off := 0
		for i, r := range s.group {
			if r == rank {
				continue
			}
			sp := s.spans[i]
			send[r] = grad[sp[0]:sp[1]]
			recv[r] = n.scatterBuf[off : off+len(piece)]
			off += len(piece)
		}
		if err := n.cfg.Comm.Exchange(ctx, send, recv); err != nil {
			return fmt.Errorf("optimizer parallel: reduce-scatter of the gradient of %s: %w", s.full.Name, err)
		}
		part := func(j int) []float32 {
			if s.group[j] == rank {
				return piece
			}
			return recv[s.group[j]]
		}
		acc := part(0)
		for j := 1; j < len(s.group); j++ {
			for i, v := range part(j) {
				acc[i] += v
			}
		}
		copy(piece, acc)
	}
	return nil
}

// OptimizerLayouts returns the strategy file entry of every parameter
// whose update is split across ranks (opt_weight_shard_step and
// opt_weight_shard_size set), by name; none without the parallel
// optimizer.
func (n *Net) OptimizerLayouts() map[string]parallel.TensorLayout {
	out := map[string]parallel.TensorLayout{}
	for _, s := range n.optShards {
		out[s.full.Name] = s.layout
	}
	return out
}

// PieceBoxes returns, for every parameter whose update is split across
// ranks, the part of the whole tensor this rank updates and checkpoints
// (its moment too), by name.
func (n *Net) PieceBoxes() map[string]parallel.Box {
	out := map[string]parallel.Box{}
	for _, s := range n.optShards {
		out[s.full.Name] = s.box
	}
	return out
}
