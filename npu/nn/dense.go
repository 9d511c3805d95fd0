package nn

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/tensor"
)

// Dense is a fully connected layer y = x·Wᵀ + b with W of shape [Out, In]
// and b of shape [Out], as MindSpore's nn.Dense.
type Dense struct {
	name         string
	in, out      int
	weight, bias *Param
	dev          *Device
	x, y, dx     *tensor.Tensor
	params       []*Param
}

// NewDense builds a Dense layer with parameters name.weight and name.bias
// (when hasBias). The weight is drawn from U(−1/√in, 1/√in) and the bias is
// zero, as MindSpore's ResNet initialises end_point.
func NewDense(name string, in, out int, hasBias bool, seed uint64, dev *Device) (*Dense, error) {
	if in <= 0 || out <= 0 {
		return nil, fmt.Errorf("dense %s: in %d, out %d must be positive: %w", name, in, out, ErrConfig)
	}
	d := &Dense{name: name, in: in, out: out, dev: orSerial(dev)}
	var err error
	if d.weight, err = newParam(name+".weight", true, out, in); err != nil {
		return nil, err
	}
	initKaimingUniformFanIn(d.weight, seed)
	d.params = []*Param{d.weight}
	if hasBias {
		if d.bias, err = newParam(name+".bias", true, out); err != nil {
			return nil, err
		}
		d.params = append(d.params, d.bias)
	}
	return d, nil
}

// Params returns weight (and bias).
func (d *Dense) Params() []*Param { return d.params }

// Forward computes x·Wᵀ + b for x of shape [N In].
func (d *Dense) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	if x.Rank() != 2 || x.Dim(1) != d.in || x.Dim(0) < 1 {
		return nil, fmt.Errorf("dense %s: input %v, want [N %d]: %w", d.name, x.Shape(), d.in, tensor.ErrShape)
	}
	n := x.Dim(0)
	var err error
	if d.y, err = d.dev.ensure(d.name, "output", d.y, n, d.out); err != nil {
		return nil, fmt.Errorf("dense %s output: %w", d.name, err)
	}
	if d.dx, err = d.dev.ensure(d.name, "input gradient", d.dx, n, d.in); err != nil {
		return nil, fmt.Errorf("dense %s input gradient: %w", d.name, err)
	}
	d.x = x
	y := d.y.Data()
	d.dev.workers.Gemm(false, true, n, d.out, d.in, 1, x.Data(), d.in, d.weight.Value.Data(), d.in, 0, y, d.out)
	if d.bias != nil {
		b := d.bias.Value.Data()
		for i := 0; i < n; i++ {
			row := y[i*d.out : (i+1)*d.out]
			for j := range row {
				row[j] += b[j]
			}
		}
	}
	return d.y, nil
}

// Backward writes dL/dW = dyᵀ·x and dL/db = Σ dy, and returns dy·W.
func (d *Dense) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := checkGrad("dense", d.name, d.y, dy); err != nil {
		return nil, err
	}
	n, w := d.x.Dim(0), d.dev.workers
	g := dy.Data()
	w.Gemm(true, false, d.out, d.in, n, 1, g, d.out, d.x.Data(), d.in, 0, d.weight.Grad.Data(), d.in)
	if d.bias != nil {
		db := d.bias.Grad.Data()
		clear(db)
		for i := 0; i < n; i++ {
			for j, v := range g[i*d.out : (i+1)*d.out] {
				db[j] += v
			}
		}
	}
	w.Gemm(false, false, n, d.in, d.out, 1, g, d.out, d.weight.Value.Data(), d.in, 0, d.dx.Data(), d.in)
	return d.dx, nil
}
