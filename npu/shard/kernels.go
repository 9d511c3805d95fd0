package shard

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/tensor"
)

// alloc returns t when it already has the shape, else a new zeroed tensor
// counted on dev as owner's role (replacing what held before under that
// name). owner and role are apart so that the steady state builds no
// string.
func alloc(dev *nn.Device, owner, role string, t *tensor.Tensor, shape ...int) (*tensor.Tensor, error) {
	if t != nil && t.HasShape(shape...) {
		return t, nil
	}
	if err := dev.Reserve(owner+" "+role, 4*int64(volume(shape))); err != nil {
		return nil, err
	}
	return tensor.New(shape...)
}

// matMul is MindSpore's MatMul with a parameter as second operand and no
// transposition: y = x·w for x [N K] and w [K M] (the seeds' fc weight is
// [in, out]).
type matMul struct {
	name     string
	k, m     int
	weight   *nn.Param
	dev      *nn.Device
	x, y, dx *tensor.Tensor
}

// newMatMul builds a matMul whose weight, named weight, is [k m]. With
// init set the weight is drawn as a Dense weight of fan-in k is.
func newMatMul(name, weight string, k, m int, init bool, seed uint64, dev *nn.Device) (*matMul, error) {
	if k <= 0 || m <= 0 {
		return nil, fmt.Errorf("matmul %s: weight [%d %d] must be positive: %w", name, k, m, ErrConfig)
	}
	w, err := nn.NewParam(weight, true, k, m)
	if err != nil {
		return nil, err
	}
	if init {
		nn.InitUniformFanIn(w, k, seed)
	}
	return &matMul{name: name, k: k, m: m, weight: w, dev: dev}, nil
}

func (l *matMul) Params() []*nn.Param { return []*nn.Param{l.weight} }

func (l *matMul) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	if x.Rank() != 2 || x.Dim(1) != l.k || x.Dim(0) < 1 {
		return nil, fmt.Errorf("matmul %s: input %v, want [N %d]: %w", l.name, x.Shape(), l.k, tensor.ErrShape)
	}
	n := x.Dim(0)
	var err error
	if l.y, err = alloc(l.dev, l.name, "output", l.y, n, l.m); err != nil {
		return nil, fmt.Errorf("matmul %s: %w", l.name, err)
	}
	if l.dx, err = alloc(l.dev, l.name, "input gradient", l.dx, n, l.k); err != nil {
		return nil, fmt.Errorf("matmul %s: %w", l.name, err)
	}
	l.x = x
	l.dev.Workers().Gemm(false, false, n, l.m, l.k, 1, x.Data(), l.k, l.weight.Value.Data(), l.m, 0, l.y.Data(), l.m)
	return l.y, nil
}

// Backward writes dL/dw = xᵀ·dy and returns dy·wᵀ.
func (l *matMul) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if l.x == nil {
		return nil, fmt.Errorf("matmul %s: %w", l.name, nn.ErrNoForward)
	}
	n := l.x.Dim(0)
	if !dy.HasShape(n, l.m) {
		return nil, fmt.Errorf("matmul %s: gradient %v, want [%d %d]: %w", l.name, dy.Shape(), n, l.m, tensor.ErrShape)
	}
	w := l.dev.Workers()
	w.Gemm(true, false, l.k, l.m, n, 1, l.x.Data(), l.k, dy.Data(), l.m, 0, l.weight.Grad.Data(), l.m)
	w.Gemm(false, true, n, l.k, l.m, 1, dy.Data(), l.m, l.weight.Value.Data(), l.m, 0, l.dx.Data(), l.k)
	return l.dx, nil
}

// biasAdd is MindSpore's BiasAdd on [N M]: y = x + b, row by row, the
// addition nn.Dense makes after its product (so a Dense split into MatMul
// and BiasAdd computes the same bits).
type biasAdd struct {
	name  string
	bias  *nn.Param
	dev   *nn.Device
	y, dx *tensor.Tensor
}

func newBiasAdd(name, bias string, m int, dev *nn.Device) (*biasAdd, error) {
	if m <= 0 {
		return nil, fmt.Errorf("bias_add %s: %d channels: %w", name, m, ErrConfig)
	}
	b, err := nn.NewParam(bias, true, m)
	if err != nil {
		return nil, err
	}
	return &biasAdd{name: name, bias: b, dev: dev}, nil
}

func (l *biasAdd) Params() []*nn.Param { return []*nn.Param{l.bias} }

func (l *biasAdd) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	m := l.bias.Value.Len()
	if x.Rank() != 2 || x.Dim(1) != m || x.Dim(0) < 1 {
		return nil, fmt.Errorf("bias_add %s: input %v, want [N %d]: %w", l.name, x.Shape(), m, tensor.ErrShape)
	}
	var err error
	if l.y, err = alloc(l.dev, l.name, "output", l.y, x.Shape()...); err != nil {
		return nil, fmt.Errorf("bias_add %s: %w", l.name, err)
	}
	if l.dx, err = alloc(l.dev, l.name, "input gradient", l.dx, x.Shape()...); err != nil {
		return nil, fmt.Errorf("bias_add %s: %w", l.name, err)
	}
	b, xd, y := l.bias.Value.Data(), x.Data(), l.y.Data()
	for i := 0; i < x.Dim(0); i++ {
		row, out := xd[i*m:(i+1)*m], y[i*m:(i+1)*m]
		for j := range row {
			out[j] = row[j] + b[j]
		}
	}
	return l.y, nil
}

// Backward writes dL/db, the column sums of dy in row order (as nn.Dense
// sums its bias gradient), and returns a copy of dy.
func (l *biasAdd) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if l.y == nil {
		return nil, fmt.Errorf("bias_add %s: %w", l.name, nn.ErrNoForward)
	}
	if !tensor.SameShape(l.y, dy) {
		return nil, fmt.Errorf("bias_add %s: gradient %v, want %v: %w", l.name, dy.Shape(), l.y.Shape(), tensor.ErrShape)
	}
	m := l.bias.Value.Len()
	db, g := l.bias.Grad.Data(), dy.Data()
	clear(db)
	for i := 0; i < dy.Dim(0); i++ {
		for j, v := range g[i*m : (i+1)*m] {
			db[j] += v
		}
	}
	copy(l.dx.Data(), g)
	return l.dx, nil
}

// reduceSum is MindSpore's ReduceSum over the last axis: [N M] → [N].
type reduceSum struct {
	name  string
	dev   *nn.Device
	y, dx *tensor.Tensor
}

func (l *reduceSum) Params() []*nn.Param { return nil }

func (l *reduceSum) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	if x.Rank() != 2 || x.Dim(0) < 1 || x.Dim(1) < 1 {
		return nil, fmt.Errorf("reduce_sum %s: input %v, want [N M]: %w", l.name, x.Shape(), tensor.ErrShape)
	}
	n, m := x.Dim(0), x.Dim(1)
	var err error
	if l.y, err = alloc(l.dev, l.name, "output", l.y, n); err != nil {
		return nil, fmt.Errorf("reduce_sum %s: %w", l.name, err)
	}
	if l.dx, err = alloc(l.dev, l.name, "input gradient", l.dx, n, m); err != nil {
		return nil, fmt.Errorf("reduce_sum %s: %w", l.name, err)
	}
	xd, y := x.Data(), l.y.Data()
	for i := range n {
		var s float32
		for _, v := range xd[i*m : (i+1)*m] {
			s += v
		}
		y[i] = s
	}
	return l.y, nil
}

// Backward spreads each row's gradient over the row.
func (l *reduceSum) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if l.y == nil {
		return nil, fmt.Errorf("reduce_sum %s: %w", l.name, nn.ErrNoForward)
	}
	if !tensor.SameShape(l.y, dy) {
		return nil, fmt.Errorf("reduce_sum %s: gradient %v, want %v: %w", l.name, dy.Shape(), l.y.Shape(), tensor.ErrShape)
	}
	m := l.dx.Dim(1)
	dx := l.dx.Data()
	for i, g := range dy.Data() {
		for j := range m {
			dx[i*m+j] = g
		}
	}
	return l.dx, nil
}

// crossEntropy is the seeds' SoftmaxCrossEntropyExpand over whole rows
// (classes are never split) of a slice of the batch. It returns the sum of
// its rows' losses, not their mean: the engine divides by the batch the
// loss is a mean over, and scales the gradient by the same divisor, so one
// device computes exactly what nn.SoftmaxCrossEntropyExpand computes.
type crossEntropy struct {
	dev    *nn.Device
	probs  []float32
	labels []int32
	dx     *tensor.Tensor
}

// forward returns Σ −log(softmax(row)[label] + 1e-24) over the rows of
// logits [n classes].
func (l *crossEntropy) forward(logits *tensor.Tensor, labels []int32) (float64, error) {
	n, c, err := nn.CheckLogits(logits, labels)
	if err != nil {
		return 0, err
	}
	if l.dx, err = alloc(l.dev, "loss", "input gradient", l.dx, n, c); err != nil {
		return 0, fmt.Errorf("softmax cross entropy: %w", err)
	}
	if len(l.probs) != n*c {
		l.probs = make([]float32, n*c)
	}
	l.labels = append(l.labels[:0], labels...)
	return nn.SoftmaxCrossEntropyRows(l.probs, logits.Data(), labels, c), nil
}

// backward returns the gradient of the last forward's rows for a loss that
// is inv times their sum: inv·(softmax − onehot), the label's term scaled by
// p/(p+1e-24).
func (l *crossEntropy) backward(inv float64) *tensor.Tensor {
	nn.SoftmaxCrossEntropyGrad(l.dx.Data(), l.probs, l.labels, l.dx.Dim(1), inv)
	return l.dx
}
