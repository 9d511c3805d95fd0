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

// Forward runs every layer in order. A BatchNorm2d followed by a ReLU runs
// as one pass over the data.
func (s *Sequential) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	var err error
	for i := 0; i < len(s.layers); i++ {
		if bn := s.bnReLU(i); bn != nil {
			if x, err = bn.forward(x, train, true, nil); err != nil {
				return nil, err
			}
			i++
			continue
		}
		if x, err = s.layers[i].Forward(x, train); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// Backward runs every layer's Backward in reverse order.
func (s *Sequential) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	return s.backwardTo(dy, 0)
}

// backwardTo runs the Backward of layers len−1 down to lo.
func (s *Sequential) backwardTo(dy *tensor.Tensor, lo int) (*tensor.Tensor, error) {
	var err error
	for i := len(s.layers) - 1; i >= lo; i-- {
		if i > lo {
			if bn := s.bnReLU(i - 1); bn != nil {
				if dy, err = bn.backward(dy, nil); err != nil {
					return nil, err
				}
				i--
				continue
			}
		}
		if dy, err = s.layers[i].Backward(dy); err != nil {
			return nil, err
		}
	}
	return dy, nil
}

// bnReLU returns layer i when it is a BatchNorm2d followed by a ReLU, the
// pair Forward fuses.
func (s *Sequential) bnReLU(i int) *BatchNorm2d {
	if i+1 >= len(s.layers) {
		return nil
	}
	bn, ok := s.layers[i].(*BatchNorm2d)
	if _, relu := s.layers[i+1].(*ReLU); !ok || !relu {
		return nil
	}
	return bn
}

// Params returns the parameters of every layer, in layer order.
func (s *Sequential) Params() []*Param {
	var ps []*Param
	for _, l := range s.layers {
		ps = append(ps, l.Params()...)
	}
	return ps
}
