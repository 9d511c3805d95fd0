package nn

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/tensor"
)

// Layer is one differentiable step of a network.
//
// Forward returns a tensor the layer owns, valid until its next Forward; the
// layer keeps a reference to x for Backward, so x must stay unchanged until
// then. Backward takes dL/dy for the last Forward, writes (overwrites) the
// gradients of the layer's trainable parameters and returns dL/dx, also owned
// by the layer; it never modifies dy. Buffers are allocated when a batch size
// is first seen and reused afterwards.
type Layer interface {
	Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error)
	Backward(dy *tensor.Tensor) (*tensor.Tensor, error)
	Params() []*Param
}

// ensure returns t when it already has the shape, else a new zeroed tensor.
func ensure(t *tensor.Tensor, shape ...int) (*tensor.Tensor, error) {
	if t != nil && t.HasShape(shape...) {
		return t, nil
	}
	return tensor.New(shape...)
}

// checkImage checks that x is an N×C×H×W batch with the given channel count.
// kind and name are separate so the happy path builds no string.
func checkImage(kind, name string, x *tensor.Tensor, channels int) error {
	if x.Rank() != 4 || x.Dim(0) < 1 || x.Dim(2) < 1 || x.Dim(3) < 1 || x.Dim(1) != channels {
		return fmt.Errorf("%s %s: input %v, want [N %d H W]: %w", kind, name, x.Shape(), channels, tensor.ErrShape)
	}
	return nil
}

// checkGrad checks that dy matches the output y of the last Forward.
func checkGrad(kind, name string, y, dy *tensor.Tensor) error {
	if y == nil {
		return fmt.Errorf("%s %s: %w", kind, name, ErrNoForward)
	}
	if !tensor.SameShape(y, dy) {
		return fmt.Errorf("%s %s: gradient %v, want the output shape %v: %w", kind, name, dy.Shape(), y.Shape(), tensor.ErrShape)
	}
	return nil
}

// Sequential runs layers one after another.
type Sequential struct {
	name   string
	layers []Layer
}

// NewSequential chains layers under a name used in error messages.
func NewSequential(name string, layers ...Layer) *Sequential {
	return &Sequential{name: name, layers: layers}
}

// Layers returns the chained layers.
func (s *Sequential) Layers() []Layer { return s.layers }

// Forward runs every layer in order.
func (s *Sequential) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	var err error
	for _, l := range s.layers {
		if x, err = l.Forward(x, train); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// Backward runs every layer's Backward in reverse order.
func (s *Sequential) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	var err error
	for i := len(s.layers) - 1; i >= 0; i-- {
		if dy, err = s.layers[i].Backward(dy); err != nil {
			return nil, err
		}
	}
	return dy, nil
}

// Params returns the parameters of every layer, in layer order.
func (s *Sequential) Params() []*Param {
	var ps []*Param
	for _, l := range s.layers {
		ps = append(ps, l.Params()...)
	}
	return ps
}
