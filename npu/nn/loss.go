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
	if logits.Rank() != 2 || logits.Dim(0) < 1 || logits.Dim(1) < 1 {
		return 0, fmt.Errorf("softmax cross entropy: logits %v, want [N classes]: %w", logits.Shape(), tensor.ErrShape)
	}
	n, c := logits.Dim(0), logits.Dim(1)
	if len(labels) != n {
		return 0, fmt.Errorf("softmax cross entropy: %d labels for %d logit rows: %w", len(labels), n, tensor.ErrShape)
	}
	for i, y := range labels {
		if y < 0 || int(y) >= c {
			return 0, fmt.Errorf("softmax cross entropy: label %d is %d, want [0, %d): %w", i, y, c, ErrLabel)
		}
	}
	var err error
	if l.dx, err = ensure(l.dx, n, c); err != nil {
		return 0, fmt.Errorf("softmax cross entropy gradient: %w", err)
	}
	if len(l.probs) != n*c {
		l.probs = make([]float32, n*c)
	}
	l.labels = append(l.labels[:0], labels...)
	l.n, l.classes = n, c
	x := logits.Data()
	var total float64
	for i := 0; i < n; i++ {
		row, p := x[i*c:(i+1)*c], l.probs[i*c:(i+1)*c]
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
	return float32(total / float64(n)), nil
}

// Backward returns dL/dlogits of the last Forward's mean loss:
// (softmax − onehot)/N, scaled by p/(p+1e-24) for the label's probability p.
func (l *SoftmaxCrossEntropyExpand) Backward() (*tensor.Tensor, error) {
	if l.dx == nil || l.n == 0 {
		return nil, fmt.Errorf("softmax cross entropy: %w", ErrNoForward)
	}
	n, c := l.n, l.classes
	dx := l.dx.Data()
	inv := 1 / float64(n)
	for i := 0; i < n; i++ {
		p := l.probs[i*c : (i+1)*c]
		y := l.labels[i]
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
	return l.dx, nil
}

// Probabilities returns the softmax of the last Forward, [N Classes] row-major.
func (l *SoftmaxCrossEntropyExpand) Probabilities() []float32 { return l.probs }
