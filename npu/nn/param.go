package nn

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/tensor"
)

// Param is a named model parameter. Trainable parameters (weights, biases,
// gamma, beta) have a gradient of the same shape; the BatchNorm moving
// statistics are parameters too, saved in checkpoints, but not trainable.
type Param struct {
	Name      string
	Value     *tensor.Tensor
	Grad      *tensor.Tensor // nil when Trainable is false
	Trainable bool
}

// DType is the parameter's element type as MindSpore's checkpoints name it.
const DType = "Float32"

// Shape returns the parameter's shape.
func (p *Param) Shape() []int { return p.Value.Shape() }

// NewParam returns a zero parameter of the given shape, with a zero
// gradient when trainable: for layers built outside this package.
func NewParam(name string, trainable bool, shape ...int) (*Param, error) {
	return newParam(name, trainable, shape...)
}

func newParam(name string, trainable bool, shape ...int) (*Param, error) {
	v, err := tensor.New(shape...)
	if err != nil {
		return nil, fmt.Errorf("parameter %s: %w", name, err)
	}
	p := &Param{Name: name, Value: v, Trainable: trainable}
	if trainable {
		if p.Grad, err = tensor.New(shape...); err != nil {
			return nil, fmt.Errorf("parameter %s gradient: %w", name, err)
		}
	}
	return p, nil
}

// Pack moves the values of params into one contiguous slice and the
// gradients of the trainable ones into another, both in params order, and
// returns the two slices. Each Param's Value and Grad become views of them,
// so a collective can reduce every gradient in one call. Values are copied.
func Pack(params []*Param) (values, grads []float32, err error) {
	nv, ng := 0, 0
	seen := make(map[string]bool, len(params))
	for _, p := range params {
		if seen[p.Name] {
			return nil, nil, fmt.Errorf("parameter %s appears twice: %w", p.Name, ErrConfig)
		}
		seen[p.Name] = true
		nv += p.Value.Len()
		if p.Trainable {
			ng += p.Value.Len()
		}
	}
	values, grads = make([]float32, nv), make([]float32, ng)
	ov, og := 0, 0
	for _, p := range params {
		n := p.Value.Len()
		v := values[ov : ov+n : ov+n]
		copy(v, p.Value.Data())
		if p.Value, err = tensor.FromSlice(v, p.Value.Shape()...); err != nil {
			return nil, nil, fmt.Errorf("parameter %s: %w", p.Name, err)
		}
		ov += n
		if !p.Trainable {
			p.Grad = nil
			continue
		}
		if p.Grad, err = tensor.FromSlice(grads[og:og+n:og+n], p.Value.Shape()...); err != nil {
			return nil, nil, fmt.Errorf("parameter %s gradient: %w", p.Name, err)
		}
		og += n
	}
	return values, grads, nil
}
