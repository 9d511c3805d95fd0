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
	// GatherSlices puts this rank's slices of the named parameters (or
	// their moments, "moments.<parameter>") together into whole tensors on
	// root, nil elsewhere; every rank calls it.
	GatherSlices(ctx context.Context, root int, local map[string][]float32) (map[string][]float32, error)
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

// integratedSnapshot gathers every parameter and moment slice into whole
// tensors on rank 0 (integrated_save). Rank 0 returns the checkpoint's
// tensors, the others ckpt.ErrSkipSave once they have sent theirs.
func integratedSnapshot(ctx context.Context, net *shardedNet, opt *optim.Momentum) ([]ckpt.Tensor, error) {
	local, err := Snapshot(net, opt)
	if err != nil {
		return nil, err
	}
	layouts := net.Layouts()
	slices := map[string][]float32{}
	for _, t := range local {
		if _, ok := layoutOf(layouts, t.Name); !ok || t.DType != ckpt.DTypeFloat32 {
			continue // replicated: rank 0's own copy is whole
		}
		if slices[t.Name], err = t.Float32s(); err != nil {
			return nil, err
		}
	}
	whole, err := net.GatherSlices(ctx, 0, slices)
	if err != nil {
		return nil, fmt.Errorf("integrated save: %w", err)
	}
	if whole == nil {
		return nil, ckpt.ErrSkipSave
	}
	out := make([]ckpt.Tensor, len(local))
	for i, t := range local {
		out[i] = t
		if v, ok := whole[t.Name]; ok {
			l, _ := layoutOf(layouts, t.Name)
			if out[i], err = ckpt.NewFloat32(t.Name, dims64(l.Shape), v); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

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

// pieceOf returns the optimizer piece of a parameter or of its moment.
func pieceOf(pieces map[string]parallel.Box, name string) (parallel.Box, bool) {
	if b, ok := pieces[name]; ok {
		return b, true
	}
	if p, ok := trimMoments(name); ok {
		b, ok := pieces[p]
		return b, ok
	}
	return parallel.Box{}, false
}

// pieceBoxer is a sharded network trained with the parallel optimizer:
// some of its Params are pieces of the rank's slices (shard.Net).
type pieceBoxer interface {
	PieceBoxes() map[string]parallel.Box
}

// wholeToSlice returns the part box of t when t holds the whole tensor of
// a parameter laid out by l (this rank's slice, or its optimizer piece),
// so that a whole checkpoint (integrated, or from stand_alone) starts any
// layout.
func wholeToSlice(t ckpt.Tensor, l parallel.Layout, box parallel.Box, sliceShape []int) (ckpt.Tensor, error) {
	if !sameDims(t.Dims, l.Shape) || t.DType != ckpt.DTypeFloat32 {
		return t, errNotWhole
	}
	if !slices.Equal(box.Shape, sliceShape) {
		return t, fmt.Errorf("%w: this rank's box %v, the network's slice %v", ErrMismatch, box.Shape, sliceShape)
	}
	v, err := t.Float32s()
	if err != nil {
		return t, err
	}
	dst := make([]float32, shapeLen(sliceShape))
	sliceOf(v, l.Shape, box, dst)
	return ckpt.NewFloat32(t.Name, dims64(sliceShape), dst)
}
