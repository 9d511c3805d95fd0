package nn

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/tensor"
)

// elementGrain is how many elements one worker takes at a time in
// element-wise kernels.
const elementGrain = 1 << 14

// ReLU is max(x, 0), element-wise, for tensors of any shape.
type ReLU struct {
	name  string
	dev   *Device
	y, dx *tensor.Tensor
	job   reluJob
}

// NewReLU returns a ReLU; name appears in error messages.
func NewReLU(name string, dev *Device) *ReLU { return &ReLU{name: name, dev: orSerial(dev)} }

// Params returns nil: ReLU has no parameters.
func (r *ReLU) Params() []*Param { return nil }

// Forward computes max(x, 0).
func (r *ReLU) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	var err error
	if r.y, err = r.dev.ensure(r.name, "output", r.y, x.Shape()...); err != nil {
		return nil, fmt.Errorf("relu %s output: %w", r.name, err)
	}
	if r.dx, err = r.dev.ensure(r.name, "input gradient", r.dx, x.Shape()...); err != nil {
		return nil, fmt.Errorf("relu %s input gradient: %w", r.name, err)
	}
	r.job = reluJob{a: x.Data(), out: r.y.Data(), forward: true}
	r.dev.workers.For(x.Len(), elementGrain, &r.job)
	r.job = reluJob{}
	return r.y, nil
}

// Backward passes dy where the output was positive.
func (r *ReLU) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := checkGrad("relu", r.name, r.y, dy); err != nil {
		return nil, err
	}
	r.job = reluJob{a: r.y.Data(), b: dy.Data(), out: r.dx.Data()}
	r.dev.workers.For(dy.Len(), elementGrain, &r.job)
	r.job = reluJob{}
	return r.dx, nil
}

// reluJob computes out = max(a, 0) (forward) or out = b where a > 0
// (backward, a being the forward output).
type reluJob struct {
	a, b, out []float32
	forward   bool
}

func (j *reluJob) Range(lo, hi int) {
	if j.forward {
		tensor.Affine(j.out[lo:hi], j.a[lo:hi], nil, 1, 0, true)
		return
	}
	tensor.ReLUGrad(j.out[lo:hi], j.b[lo:hi], j.a[lo:hi])
}

// addJob computes out = a + b.
type addJob struct{ a, b, out []float32 }

func (j *addJob) Range(lo, hi int) {
	tensor.AddTo(j.out[lo:hi], j.a[lo:hi], j.b[lo:hi])
}
