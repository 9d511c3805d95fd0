package shard

import (
	"context"
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// Dataset slicing: MindSpore's dataset_strategy in its tuple form. Each
// rank receives the box of every image its place in the split selects;
// the leading operators that can run on such boxes (convolutions, pooling,
// BatchNorm, ReLU) follow the split unless the strategy names them, a
// window that reads across a cut gathers its halo from the neighbours, and
// the rest of the network takes the activations through the ordinary
// redistribution.

// imageColumns are the shapes of the dataset's columns for CheckSplits:
// images [N C H W] and labels [N], the batch not checked.
var (
	imageColumns = [][]int{{0, imageChannels, imageSide, imageSide}, {0}}
	columnNames  = []string{"image", "label"}
)

// CheckDatasetStrategy checks a dataset_strategy tuple against the CIFAR
// columns (images NCHW, labels) on a job of devices devices.
func CheckDatasetStrategy(splits [][]int, devices int) error {
	return parallel.DatasetStrategy{Splits: splits}.CheckSplits(imageColumns, columnNames, devices)
}

// splitLayout lays a tensor of shape shape out as OpSpec.Shard lays an
// operator's input out under the split list split: the devices the split
// does not use repeat it along a leading axis, then one axis per split
// dimension in order.
func splitLayout(shape, split []int, devices int) parallel.Layout {
	l := parallel.Layout{Shape: slices.Clone(shape), TensorMap: make([]int, len(shape))}
	used := 1
	for _, s := range split {
		used *= s
	}
	if repeat := devices / used; repeat > 1 || used == 1 {
		l.DeviceMatrix = append(l.DeviceMatrix, repeat)
	}
	var axes []int
	for k, s := range split {
		l.TensorMap[k] = -1
		if s > 1 {
			axes = append(axes, k)
			l.DeviceMatrix = append(l.DeviceMatrix, s)
		}
	}
	for _, k := range axes {
		// The axis of dimension k, counted from the right.
		l.TensorMap[k] = len(axes) - 1 - slices.Index(axes, k)
	}
	return l
}

// DataShard is what one rank's data pipeline loads under a dataset
// strategy: shard ShardID of Shards of the samples (the batch split) and
// the window of each image at Offset with Shape (C, H, W).
type DataShard struct {
	Shards, ShardID int
	Offset, Shape   [3]int
}

// DatasetShard returns rank's part of the CIFAR images under the
// dataset_strategy tuple splits on devices devices.
func DatasetShard(splits [][]int, devices, rank int) (DataShard, error) {
	if err := CheckDatasetStrategy(splits, devices); err != nil {
		return DataShard{}, err
	}
	b := splits[0][0]
	l := splitLayout([]int{b, imageChannels, imageSide, imageSide}, splits[0], devices)
	box, err := l.Box(rank)
	if err != nil {
		return DataShard{}, err
	}
	d := DataShard{Shards: b, ShardID: box.Offset[0]}
	copy(d.Offset[:], box.Offset[1:])
	copy(d.Shape[:], box.Shape[1:])
	return d, nil
}

// imageLabels are the labels of an image batch in an operator's input.
const imageLabels = "nchw"

// FollowDataset returns s with a strategy for each leading operator of g
// that can run on the image boxes a dataset_strategy tuple gives the ranks
// (splits[0] over N, C, H, W): from the first operator on, while each
// operator's input is an image batch that it can take split that way.
// Operators s names keep their strategy (all are replaced when override
// is set, as auto_parallel's searched ones are); following stops at a named
// operator whose input is split otherwise. Without a split there is
// nothing to follow and s is returned.
func FollowDataset(g parallel.Graph, s parallel.Strategy, splits [][]int, devices int, override bool) parallel.Strategy {
	if len(splits) == 0 || len(splits[0]) != len(imageLabels) {
		return s
	}
	image := splits[0]
	split := map[byte]int{}
	whole := true
	for k, n := range image {
		split[imageLabels[k]] = n
		whole = whole && n == 1
	}
	if whole {
		return s
	}
	out := make(parallel.Strategy, len(s))
	for k, v := range s {
		out[k] = v
	}
	for _, o := range g.Ops {
		if len(o.Inputs) == 0 || o.Inputs[0].Labels != imageLabels {
			break
		}
		if st, named := s[o.Name]; named && !override {
			if !slices.Equal(st[0], image) {
				break
			}
			continue
		}
		st := make([][]int, len(o.Inputs))
		for i, t := range o.Inputs {
			st[i] = make([]int, len(t.Labels))
			for k := range t.Labels {
				st[i][k] = 1
				if i == 0 {
					st[i][k] = split[t.Labels[k]]
				}
			}
		}
		if _, err := o.Shard(st, devices); err != nil {
			break
		}
		out[o.Name] = st
	}
	return out
}

// spatialAxes returns the device matrix axes (from the left) over which l
// splits an image's H and W.
func spatialAxes(l parallel.Layout) []int {
	if len(l.TensorMap) != len(imageLabels) {
		return nil
	}
	var axes []int
	for _, m := range l.TensorMap[2:] {
		if m >= 0 {
			axes = append(axes, len(l.DeviceMatrix)-1-m)
		}
	}
	return axes
}

// haloBox returns the box of the whole input a rank needs to compute the
// output box out of a window of geometry g (a convolution's or a
// pooling's, over the whole image) whose input box is in, and the padding
// it computes that box with: the op's own padding on the image's edges,
// none where the box reaches into a neighbour's rows or columns.
func haloBox(g tensor.ConvGeom, in, out parallel.Box) (parallel.Box, tensor.Padding) {
	box := parallel.Box{Offset: slices.Clone(in.Offset), Shape: slices.Clone(in.Shape)}
	pad := tensor.Padding{Mode: tensor.PadExplicit}
	for _, d := range []struct {
		dim, kernel, stride, before, size int
		lo, hi                            *int
	}{
		{2, g.KH, g.StrideH, g.PadTop, g.H, &pad.Top, &pad.Bottom},
		{3, g.KW, g.StrideW, g.PadLeft, g.W, &pad.Left, &pad.Right},
	} {
		first := out.Offset[d.dim]*d.stride - d.before
		end := (out.Offset[d.dim]+out.Shape[d.dim]-1)*d.stride - d.before + d.kernel
		lo, hi := max(first, 0), min(end, d.size)
		box.Offset[d.dim], box.Shape[d.dim] = lo, hi-lo
		*d.lo, *d.hi = lo-first, end-hi
	}
	return box, pad
}

// halo is what a windowed operator whose input is split along H or W needs
// on every rank: the box of the input each rank computes from, and this
// rank's padding.
type halo struct {
	ext, own []parallel.Box
	pad      tensor.Padding
}

// haloOf returns the halo of operator o laid out as ol, or nil when o reads
// no window or its input is not split along H or W.
func haloOf(o opDef, ol *parallel.OpLayout, rank int) (*halo, error) {
	if o.window == nil || len(spatialAxes(ol.Inputs[0])) == 0 {
		return nil, nil
	}
	devices := ol.Inputs[0].Devices()
	h := &halo{ext: make([]parallel.Box, devices), own: make([]parallel.Box, devices)}
	for r := range devices {
		in, err := ol.Inputs[0].Box(r)
		if err != nil {
			return nil, err
		}
		out, err := ol.Output.Box(r)
		if err != nil {
			return nil, err
		}
		ext, pad := haloBox(*o.window, in, out)
		if slices.Contains(ext.Shape, 0) {
			return nil, fmt.Errorf("%w: operator %s: rank %d's output rows need no input (slices too thin for the window)", ErrConfig, o.spec.Name, r)
		}
		h.ext[r], h.own[r] = ext, in
		if r == rank {
			h.pad = pad
		}
	}
	return h, nil
}

// haloSum is the backward of a halo gathering: every rank holds the
// gradient of the input box it computed from; each rank's own slice gets
// the sum of the parts of all distinct such boxes that overlap it, added
// in the order of the boxes' first holders, so that the replicas of a
// slice add alike. A part is read from one holder of its box.
type haloSum struct {
	identity           bool
	srcShape, dstShape []int
	parts              []sumPart
	send               [][]piece
	sendBuf, recvBuf   [][]float32
	out                *tensor.Tensor
}

// sumPart is one box added into the rank's slice: from its own input
// gradient when peer is the rank, else from peer's buffer at off.
type sumPart struct {
	peer, off int
	pc        piece
}

func newHaloSum(h *halo, rank int) *haloSum {
	devices := len(h.ext)
	s := &haloSum{identity: true, srcShape: h.ext[rank].Shape, dstShape: h.own[rank].Shape}
	for r := range devices {
		s.identity = s.identity && slices.Equal(h.ext[r].Offset, h.own[r].Offset) && slices.Equal(h.ext[r].Shape, h.own[r].Shape)
	}
	if s.identity {
		return s
	}
	type holding struct {
		box     parallel.Box
		holders []int
	}
	var held []holding
	for r, b := range h.ext {
		i := slices.IndexFunc(held, func(x holding) bool {
			return slices.Equal(x.box.Offset, b.Offset) && slices.Equal(x.box.Shape, b.Shape)
		})
		if i < 0 {
			held = append(held, holding{box: b})
			i = len(held) - 1
		}
		held[i].holders = append(held[i].holders, r)
	}
	s.send = make([][]piece, devices)
	recvLen := make([]int, devices)
	for r := range devices { // r receives
		for _, x := range held {
			common, ok := x.box.Intersect(h.own[r])
			if !ok {
				continue
			}
			holder := x.holders[r%len(x.holders)]
			if slices.Contains(x.holders, r) {
				holder = r
			}
			pc := piece{from: sub(common.Offset, x.box.Offset), to: sub(common.Offset, h.own[r].Offset), shape: common.Shape}
			switch {
			case r == rank && holder == rank:
				s.parts = append(s.parts, sumPart{peer: rank, pc: pc})
			case r == rank:
				s.parts = append(s.parts, sumPart{peer: holder, off: recvLen[holder], pc: pc})
				recvLen[holder] += volume(pc.shape)
			case holder == rank:
				s.send[r] = append(s.send[r], pc)
			}
		}
	}
	s.sendBuf, s.recvBuf = make([][]float32, devices), make([][]float32, devices)
	for q := range devices {
		s.sendBuf[q] = make([]float32, piecesVolume(s.send[q]))
		s.recvBuf[q] = make([]float32, recvLen[q])
	}
	return s
}

// bytes returns the memory the sum holds on the device.
func (s *haloSum) bytes() int64 {
	if s.identity {
		return 0
	}
	n := volume(s.dstShape)
	for q := range s.sendBuf {
		n += len(s.sendBuf[q]) + len(s.recvBuf[q])
	}
	return 4 * int64(n)
}

// run sums src, this rank's gradient of its input box, into the gradient
// of its own slice (src itself when no box reaches past its slice).
func (s *haloSum) run(ctx context.Context, comm Comm, src *tensor.Tensor) (*tensor.Tensor, error) {
	if !src.HasShape(s.srcShape...) {
		return nil, fmt.Errorf("halo sum: gradient %v, want %v: %w", src.Shape(), s.srcShape, tensor.ErrShape)
	}
	if s.identity {
		return src, nil
	}
	if s.out == nil {
		var err error
		if s.out, err = tensor.New(s.dstShape...); err != nil {
			return nil, fmt.Errorf("halo sum: %w", err)
		}
	}
	g := src.Data()
	for q, pieces := range s.send {
		off := 0
		for _, pc := range pieces {
			parallel.CopyBox(s.sendBuf[q][off:], pc.shape, nil, g, s.srcShape, pc.from, pc.shape)
			off += volume(pc.shape)
		}
	}
	if err := comm.Exchange(ctx, s.sendBuf, s.recvBuf); err != nil {
		return nil, fmt.Errorf("halo sum: %w", err)
	}
	d := s.out.Data()
	clear(d)
	for _, pt := range s.parts {
		if pt.peer == comm.Rank() {
			addBox(d, s.dstShape, pt.pc.to, g, s.srcShape, pt.pc.from, pt.pc.shape)
			continue
		}
		addBox(d, s.dstShape, pt.pc.to, s.recvBuf[pt.peer][pt.off:], pt.pc.shape, nil, pt.pc.shape)
	}
	return s.out, nil
}

// addBox adds the box of src at srcOff (nil: the origin) into dst at
// dstOff, both row-major with the given shapes.
func addBox(dst []float32, dstShape, dstOff []int, src []float32, srcShape, srcOff []int, shape []int) {
	at := func(off []int, k int) int {
		if off == nil {
			return 0
		}
		return off[k]
	}
	last := len(shape) - 1
	rows := volume(shape[:last])
	n := shape[last]
	for r := range rows {
		d, s := at(dstOff, last), at(srcOff, last)
		dStride, sStride := dstShape[last], srcShape[last]
		rem := r
		for k := last - 1; k >= 0; k-- {
			i := rem % shape[k]
			rem /= shape[k]
			d += (at(dstOff, k) + i) * dStride
			s += (at(srcOff, k) + i) * sStride
			dStride *= dstShape[k]
			sStride *= srcShape[k]
		}
		for j, v := range src[s : s+n] {
			dst[d+j] += v
		}
	}
}

// statsGroup sums a BatchNorm's per-image statistics over the ranks that
// hold other rows or columns of the same images, so that an image split
// along H or W is normalised with the statistics of whole images, as
// stand_alone normalises it. The float64 sums travel exactly, each as
// three float32 parts, and every rank adds the group's in group order, so
// the group's ranks compute the same bits.
type statsGroup struct {
	n     *Net
	group []int
	send  [][]float32
	recv  [][]float32
	own   []float64
}

func (g *statsGroup) reduce(sums []float64) error {
	ctx := g.n.stepCtx
	if ctx == nil {
		ctx = context.Background()
	}
	devices := g.n.cfg.Devices
	if g.send == nil {
		g.send, g.recv = make([][]float32, devices), make([][]float32, devices)
	}
	for r := range devices {
		size := 0
		if slices.Contains(g.group, r) && r != g.n.cfg.Rank {
			size = 3 * len(sums)
		}
		g.send[r], g.recv[r] = resize(g.send[r], size), resize(g.recv[r], size)
	}
	for _, r := range g.group {
		if r == g.n.cfg.Rank {
			continue
		}
		for i, v := range sums {
			a := float32(v)
			b := float32(v - float64(a))
			c := float32(v - float64(a) - float64(b))
			g.send[r][3*i], g.send[r][3*i+1], g.send[r][3*i+2] = a, b, c
		}
	}
	if err := g.n.cfg.Comm.Exchange(ctx, g.send, g.recv); err != nil {
		return fmt.Errorf("batchnorm statistics over ranks %v: %w", g.group, err)
	}
	g.own = append(g.own[:0], sums...)
	own := g.own
	for i := range sums {
		var total float64
		for _, r := range g.group {
			if r == g.n.cfg.Rank {
				total += own[i]
				continue
			}
			p := g.recv[r][3*i : 3*i+3]
			total += float64(p[0]) + float64(p[1]) + float64(p[2])
		}
		sums[i] = total
	}
	return nil
}

func resize(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// setSpatialStats makes a BatchNorm whose input is split along H or W over
// the group sum its statistics there, and returns the axes its parameters'
// gradients then need no reduction over (they are whole on every rank of
// the group).
func (n *Net) setSpatialStats(layer nn.Layer, ol *parallel.OpLayout) ([]int, error) {
	axes := spatialAxes(ol.Inputs[0])
	bn, ok := layer.(*nn.BatchNorm2d)
	if len(axes) == 0 || !ok {
		return nil, nil
	}
	group, err := ol.Inputs[0].Group(n.cfg.Rank, axes)
	if err != nil {
		return nil, err
	}
	g := &statsGroup{n: n, group: group}
	bn.SetStatsReducer(len(group), g.reduce)
	return axes, nil
}

// withoutAxes returns axes without those in drop.
func withoutAxes(axes, drop []int) []int {
	var out []int
	for _, a := range axes {
		if !slices.Contains(drop, a) {
			out = append(out, a)
		}
	}
	return out
}

// cutWindow copies this rank's window of whole images x (C, H and W as
// the data layout cuts them, all of x's rows) into a tensor.
func cutWindow(x *tensor.Tensor, data parallel.Layout, rank int) (*tensor.Tensor, error) {
	box, err := data.Box(rank)
	if err != nil {
		return nil, err
	}
	shape := append([]int{x.Dim(0)}, box.Shape[1:]...)
	out, err := tensor.New(shape...)
	if err != nil {
		return nil, err
	}
	off := append([]int{0}, box.Offset[1:]...)
	parallel.CopyBox(out.Data(), shape, nil, x.Data(), x.Shape(), off, shape)
	return out, nil
}
