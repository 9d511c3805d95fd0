package nn

import (
	"fmt"
	"math"

	"github.com/mspipe/mspipe/npu/tensor"
)

// crossEntropyEps is added to the softmax before the log, as in the seeds'
// SoftmaxCrossEntropyExpand (Tensor(1e-24, float32)), so a vanishing
// probability gives a large finite loss instead of +Inf.
const crossEntropyEps = 1e-24

// SoftmaxCrossEntropyExpand is the loss of the seeds' distributed ResNet
// example with sparse=True:
//
//	softmax = exp(x − max(x)) / Σ exp(x − max(x))   (per row)
//	loss    = mean over the batch of −log(softmax[label] + 1e-24)
//
// Element-wise steps run in float32 like MindSpore's small operators; the
// batch mean is accumulated in float64.
type SoftmaxCrossEntropyExpand struct {
	n, classes int
	probs      []float32
	labels     []int32
	dx         *tensor.Tensor
}

// NewSoftmaxCrossEntropyExpand returns the loss with sparse (class index)
// labels.
func NewSoftmaxCrossEntropyExpand() *SoftmaxCrossEntropyExpand {
	return &SoftmaxCrossEntropyExpand{}
}

// Forward returns the mean loss of logits [N Classes] against labels
// (len N, each in [0, Classes)).
func (l *SoftmaxCrossEntropyExpand) Forward(logits *tensor.Tensor, labels []int32) (float32, error) {
	n, c, err := CheckLogits(logits, labels)
	if err != nil {
		return 0, err
	}
	if l.dx, err = ensure(l.dx, n, c); err != nil {
		return 0, fmt.Errorf("softmax cross entropy gradient: %w", err)
	}
	if len(l.probs) != n*c {
		l.probs = make([]float32, n*c)
	}
	l.labels = append(l.labels[:0], labels...)
	l.n, l.classes = n, c
	total := SoftmaxCrossEntropyRows(l.probs, logits.Data(), labels, c)
	return float32(total / float64(n)), nil
}

// Backward returns dL/dlogits of the last Forward's mean loss:
// (softmax − onehot)/N, scaled by p/(p+1e-24) for the label's probability p.
func (l *SoftmaxCrossEntropyExpand) Backward() (*tensor.Tensor, error) {
	if l.dx == nil || l.n == 0 {
		return nil, fmt.Errorf("softmax cross entropy: %w", ErrNoForward)
	}
	SoftmaxCrossEntropyGrad(l.dx.Data(), l.probs, l.labels, l.classes, 1/float64(l.n))
	return l.dx, nil
}

// Probabilities returns the softmax of the last Forward, [N Classes] row-major.
func (l *SoftmaxCrossEntropyExpand) Probabilities() []float32 { return l.probs }

// CheckLogits checks what a softmax cross entropy takes: logits
// [N classes] with N, classes ≥ 1, and N labels, each in [0, classes). It
// returns N and classes.
func CheckLogits(logits *tensor.Tensor, labels []int32) (n, classes int, err error) {
	if logits.Rank() != 2 || logits.Dim(0) < 1 || logits.Dim(1) < 1 {
		return 0, 0, fmt.Errorf("softmax cross entropy: logits %v, want [N classes]: %w", logits.Shape(), tensor.ErrShape)
	}
	n, classes = logits.Dim(0), logits.Dim(1)
	if len(labels) != n {
		return 0, 0, fmt.Errorf("softmax cross entropy: %d labels for %d logit rows: %w", len(labels), n, tensor.ErrShape)
	}
	for i, y := range labels {
		if y < 0 || int(y) >= classes {
			return 0, 0, fmt.Errorf("softmax cross entropy: label %d is %d, want [0, %d): %w", i, y, classes, ErrLabel)
		}
	}
	return n, classes, nil
}

// SoftmaxCrossEntropyRows is the forward kernel of the loss, shared by
// SoftmaxCrossEntropyExpand and the split network of npu/shard: for each
// row i of x (len(labels) rows of classes values, row-major) it writes the
// row's softmax into the same row of probs and adds −log(softmax[label] +
// 1e-24) to the sum it returns. Element-wise steps are float32, the sum
// float64. Inputs are checked by the caller (CheckLogits).
func SoftmaxCrossEntropyRows(probs, x []float32, labels []int32, classes int) float64 {
	c := classes
	var total float64
	for i := range labels {
		row, p := x[i*c:(i+1)*c], probs[i*c:(i+1)*c]
		m := row[0]
		for _, v := range row[1:] {
			m = max(m, v)
		}
		var sum float32
		for j, v := range row {
			e := float32(math.Exp(float64(v - m)))
			p[j] = e
			sum += e
		}
		for j := range p {
			p[j] /= sum
		}
		total -= math.Log(float64(p[labels[i]] + crossEntropyEps))
	}
	return total
}

// SoftmaxCrossEntropyGrad is the backward kernel: the gradient, into dx,
// of inv times the sum SoftmaxCrossEntropyRows returned for probs and
// labels, that is inv·(softmax − onehot) with the label's term scaled by
// p/(p+1e-24).
func SoftmaxCrossEntropyGrad(dx, probs []float32, labels []int32, classes int, inv float64) {
	c := classes
	for i, y := range labels {
		p := probs[i*c : (i+1)*c]
		py := float64(p[y])
		scale := inv * py / (py + crossEntropyEps)
		for j, v := range p {
			g := float64(v)
			if int32(j) == y {
				g--
			}
			dx[i*c+j] = float32(scale * g)
		}
	}
}
