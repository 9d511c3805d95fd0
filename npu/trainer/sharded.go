package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// ShardedNet is one rank's part of a network whose operators are split
// across ranks (npu/shard builds them).
type ShardedNet interface {
	// TrainStep runs forward, the loss, backward and every gradient
	// reduction for this rank's batch; the Grad of each local parameter is
	// then final. The loss is the global batch's.
	TrainStep(ctx context.Context, x *tensor.Tensor, labels []int32) (float32, error)
	// Predict returns the whole logits of x; every rank calls it.
	Predict(ctx context.Context, x *tensor.Tensor) (*tensor.Tensor, error)
	// Params returns this rank's slices, named as the whole model's.
	Params() []*nn.Param
	Device() *nn.Device
	// Layouts returns the whole-tensor layout of every parameter.
	Layouts() map[string]parallel.Layout
	Close()
}

type shardedNet struct {
	ShardedNet
	name string
}

func (s *shardedNet) Name() string { return s.name }

func (s *shardedNet) TrainableParams() []*nn.Param {
	var out []*nn.Param
	for _, p := range s.Params() {
		if p.Trainable {
			out = append(out, p)
		}
	}
	return out
}

func (s *shardedNet) step(ctx context.Context, x *tensor.Tensor, labels []int32) (float32, error) {
	return s.TrainStep(ctx, x, labels)
}

func (s *shardedNet) predict(ctx context.Context, x *tensor.Tensor) (*tensor.Tensor, error) {
	return s.Predict(ctx, x)
}

// layoutOf returns the layout of a parameter or of its optimizer moment
// (moments.<parameter>), which is laid out as the parameter is.
func layoutOf(layouts map[string]parallel.Layout, name string) (parallel.Layout, bool) {
	if l, ok := layouts[name]; ok {
		return l, true
	}
	if p, ok := trimMoments(name); ok {
		l, ok := layouts[p]
		return l, ok
	}
	return parallel.Layout{}, false
}

func trimMoments(name string) (string, bool) {
	const prefix = "moments."
	if len(name) > len(prefix) && name[:len(prefix)] == prefix {
		return name[len(prefix):], true
	}
	return "", false
}

// sliceOf copies the part of a whole tensor that box covers into dst.
func sliceOf(whole []float32, shape []int, box parallel.Box, dst []float32) {
	parallel.CopyBox(dst, box.Shape, nil, whole, shape, box.Offset, box.Shape)
}

// placeSlice copies src, the box's part, into its place in whole.
func placeSlice(whole []float32, shape []int, box parallel.Box, src []float32) {
	parallel.CopyBox(whole, shape, box.Offset, src, box.Shape, nil, box.Shape)
}

// integratedSnapshot gathers every parameter and moment slice into whole
// tensors on rank 0 (integrated_save): each distinct slice is sent once, by
// the lowest rank holding it. Rank 0 returns the checkpoint's tensors, the
// others ckpt.ErrSkipSave once they have sent theirs.
func integratedSnapshot(ctx context.Context, net *shardedNet, opt *optim.Momentum, exchange func(context.Context, [][]float32, [][]float32) error, rank int) ([]ckpt.Tensor, error) {
	if exchange == nil {
		return nil, fmt.Errorf("%w: integrated save of a sharded network needs the collective's Exchange", ErrConfig)
	}
	local, err := Snapshot(net, opt)
	if err != nil {
		return nil, err
	}
	layouts := net.Layouts()
	devices := 0
	for _, l := range layouts {
		devices = l.Devices()
		break
	}
	if devices == 0 {
		return local, nil
	}
	// What each rank sends to rank 0, and what rank 0 receives from each,
	// in tensor order.
	type piece struct {
		tensor int
		box    parallel.Box
	}
	plan := make([][]piece, devices) // by sending rank
	for i, t := range local {
		l, ok := layoutOf(layouts, t.Name)
		if !ok || t.DType != ckpt.DTypeFloat32 {
			continue // replicated: rank 0's own copy is whole
		}
		seen := map[string]bool{}
		for r := 0; r < devices; r++ {
			box, err := l.Box(r)
			if err != nil {
				return nil, fmt.Errorf("integrated save: %s: %w", t.Name, err)
			}
			key := fmt.Sprint(box.Offset)
			if seen[key] {
				continue
			}
			seen[key] = true
			plan[r] = append(plan[r], piece{i, box})
		}
	}
	send := make([][]float32, devices)
	recv := make([][]float32, devices)
	for _, p := range plan[rank] {
		v, err := local[p.tensor].Float32s()
		if err != nil {
			return nil, err
		}
		send[0] = append(send[0], v...)
	}
	if rank == 0 {
		for r := range recv {
			n := 0
			for _, p := range plan[r] {
				n += boxLen(p.box)
			}
			recv[r] = make([]float32, n)
		}
	}
	if err := exchange(ctx, send, recv); err != nil {
		return nil, fmt.Errorf("integrated save: gather the slices: %w", err)
	}
	if rank != 0 {
		return nil, ckpt.ErrSkipSave
	}
	whole := map[int][]float32{}
	for r := range plan {
		off := 0
		for _, p := range plan[r] {
			l, _ := layoutOf(layouts, local[p.tensor].Name)
			if whole[p.tensor] == nil {
				whole[p.tensor] = make([]float32, shapeLen(l.Shape))
			}
			n := boxLen(p.box)
			placeSlice(whole[p.tensor], l.Shape, p.box, recv[r][off:off+n])
			off += n
		}
	}
	out := slices.Clone(local)
	for i, v := range whole {
		l, _ := layoutOf(layouts, local[i].Name)
		t, err := ckpt.NewFloat32(local[i].Name, dims64(l.Shape), v)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

func boxLen(b parallel.Box) int { return shapeLen(b.Shape) }

func shapeLen(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// errNotWhole is returned by wholeToSlice for a tensor that is neither the
// slice nor the whole tensor.
var errNotWhole = errors.New("neither this rank's slice nor the whole tensor")

// wholeToSlice returns this rank's slice of t when t holds the whole tensor
// of a parameter laid out by l, so that a whole checkpoint (integrated, or
// from stand_alone) starts any layout.
func wholeToSlice(t ckpt.Tensor, l parallel.Layout, rank int, sliceShape []int) (ckpt.Tensor, error) {
	if !sameDims(t.Dims, l.Shape) || t.DType != ckpt.DTypeFloat32 {
		return t, errNotWhole
	}
	box, err := l.Box(rank)
	if err != nil {
		return t, err
	}
	if !slices.Equal(box.Shape, sliceShape) {
		return t, fmt.Errorf("%w: rank %d's box %v, the network's slice %v", ErrMismatch, rank, box.Shape, sliceShape)
	}
	v, err := t.Float32s()
	if err != nil {
		return t, err
	}
	dst := make([]float32, shapeLen(sliceShape))
	sliceOf(v, l.Shape, box, dst)
	return ckpt.NewFloat32(t.Name, dims64(sliceShape), dst)
}
