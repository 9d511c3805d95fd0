package nn

import (
	"fmt"
	"math"

	"github.com/mspipe/mspipe/npu/tensor"
)

// BatchNorm2dConfig describes a BatchNorm2d. Momentum follows MindSpore: the
// moving statistics are updated as moving = Momentum·moving + (1−Momentum)·batch.
type BatchNorm2dConfig struct {
	Channels int
	Eps      float32 // MindSpore default 1e-5; its ResNet-50 uses 1e-4
	Momentum float32 // MindSpore default 0.9
}

// BatchNorm2d normalises each channel of an NCHW batch. In training it uses
// the batch mean and biased variance over N·H·W and updates the moving
// statistics with them (MindSpore's CPU kernel also feeds the biased variance
// into moving_variance); otherwise it uses the moving statistics.
//
// Parameters, in MindSpore's order: moving_mean, moving_variance (not
// trainable), gamma, beta.
type BatchNorm2d struct {
	name                        string
	cfg                         BatchNorm2dConfig
	mean, variance, gamma, beta *Param
	dev                         *Device
	x, y, dx                    *tensor.Tensor
	batchMean, batchInvStd      []float32
	trained                     bool
	relu                        bool // the last forward was fused with a ReLU
	job                         bnJob
	params                      []*Param
}

// NewBatchNorm2d builds a BatchNorm2d with parameters name.moving_mean,
// name.moving_variance, name.gamma and name.beta, initialised to 0, 1, 1, 0.
func NewBatchNorm2d(name string, cfg BatchNorm2dConfig, dev *Device) (*BatchNorm2d, error) {
	if cfg.Channels <= 0 || !(cfg.Eps > 0) || !(cfg.Momentum >= 0 && cfg.Momentum <= 1) {
		return nil, fmt.Errorf("batchnorm %s: channels %d, eps %g, momentum %g: want channels > 0, eps > 0, momentum in [0, 1]: %w",
			name, cfg.Channels, cfg.Eps, cfg.Momentum, ErrConfig)
	}
	b := &BatchNorm2d{name: name, cfg: cfg, dev: orSerial(dev)}
	var err error
	for _, p := range []struct {
		dst       **Param
		suffix    string
		trainable bool
		value     float32
	}{
		{&b.mean, ".moving_mean", false, 0},
		{&b.variance, ".moving_variance", false, 1},
		{&b.gamma, ".gamma", true, 1},
		{&b.beta, ".beta", true, 0},
	} {
		if *p.dst, err = newParam(name+p.suffix, p.trainable, cfg.Channels); err != nil {
			return nil, err
		}
		(*p.dst).Value.Fill(p.value)
		b.params = append(b.params, *p.dst)
	}
	b.batchMean = make([]float32, cfg.Channels)
	b.batchInvStd = make([]float32, cfg.Channels)
	return b, nil
}

// Params returns moving_mean, moving_variance, gamma, beta.
func (b *BatchNorm2d) Params() []*Param { return b.params }

// Forward normalises x, an [N C H W] batch; train selects batch statistics
// (and updates the moving ones) over moving statistics.
func (b *BatchNorm2d) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	return b.forward(x, train, false, nil)
}

// forward is Forward followed by ReLU when relu is set, with the elements of
// residual (x's shape) added before the ReLU when it is not nil: the fused
// tails of a convolution unit and of a residual block.
func (b *BatchNorm2d) forward(x *tensor.Tensor, train, relu bool, residual []float32) (*tensor.Tensor, error) {
	if err := checkImage("batchnorm", b.name, x, b.cfg.Channels); err != nil {
		return nil, err
	}
	var err error
	if b.y, err = ensure(b.y, x.Shape()...); err != nil {
		return nil, fmt.Errorf("batchnorm %s output: %w", b.name, err)
	}
	if b.dx, err = ensure(b.dx, x.Shape()...); err != nil {
		return nil, fmt.Errorf("batchnorm %s input gradient: %w", b.name, err)
	}
	if residual != nil && len(residual) != x.Len() {
		return nil, fmt.Errorf("batchnorm %s: residual of %d elements for input %v: %w", b.name, len(residual), x.Shape(), tensor.ErrShape)
	}
	b.x, b.trained, b.relu = x, train, relu
	b.job = bnJob{b: b, n: x.Dim(0), plane: x.Dim(2) * x.Dim(3), forward: true, train: train, residual: residual}
	b.dev.workers.For(b.cfg.Channels, 1, &b.job)
	b.job = bnJob{}
	return b.y, nil
}

// Backward writes the gamma and beta gradients and returns dL/dx. After an
// inference Forward the moving statistics are constants of the map. After a
// forward fused with a ReLU it back-propagates through both.
func (b *BatchNorm2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	return b.backward(dy, nil)
}

// backward is Backward; after a forward with relu, the gradient dy masked by
// the ReLU is written to masked when it is not nil (else to dx, overwritten
// afterwards), for a caller that needs it too.
func (b *BatchNorm2d) backward(dy *tensor.Tensor, masked []float32) (*tensor.Tensor, error) {
	if err := checkGrad("batchnorm", b.name, b.y, dy); err != nil {
		return nil, err
	}
	b.job = bnJob{b: b, n: b.x.Dim(0), plane: b.x.Dim(2) * b.x.Dim(3), dy: dy.Data(), train: b.trained}
	if b.relu {
		b.job.mask, b.job.masked = b.y.Data(), b.dx.Data()
		if masked != nil {
			b.job.masked = masked[:dy.Len()]
		}
	}
	b.dev.workers.For(b.cfg.Channels, 1, &b.job)
	b.job = bnJob{}
	return b.dx, nil
}

// bnJob runs the forward or backward pass for channels lo..hi-1. Each
// channel is summed plane by plane in image order, so its statistics do not
// depend on which worker ran it.
type bnJob struct {
	b              *BatchNorm2d
	n, plane       int
	dy             []float32
	residual       []float32
	mask, masked   []float32 // backward through a fused ReLU: its output, and where the masked dy goes
	forward, train bool
}

func (j *bnJob) Range(lo, hi int) {
	for c := lo; c < hi; c++ {
		if j.forward {
			j.forwardChannel(c)
		} else {
			j.backwardChannel(c)
		}
	}
}

// stats returns the mean and 1/sqrt(var+eps) the channel is normalised with.
func (j *bnJob) stats(c int) (mean, invStd float64) {
	b := j.b
	if !j.train {
		v := float64(b.variance.Value.Data()[c])
		return float64(b.mean.Value.Data()[c]), 1 / math.Sqrt(v+float64(b.cfg.Eps))
	}
	return float64(b.batchMean[c]), float64(b.batchInvStd[c])
}

// planes returns the slice of channel c in image i of data.
func (j *bnJob) planeOf(data []float32, i, c int) []float32 {
	off := (i*j.b.cfg.Channels + c) * j.plane
	return data[off : off+j.plane]
}

func (j *bnJob) forwardChannel(c int) {
	b, x, y := j.b, j.b.x.Data(), j.b.y.Data()
	if j.train {
		// One pass: Σx and Σx² in float64 lose nothing that matters unless
		// mean²/variance approaches 1e9.
		var sum, sq float64
		for i := 0; i < j.n; i++ {
			s, q := tensor.SumSquares(j.planeOf(x, i, c))
			sum += s
			sq += q
		}
		count := float64(j.n * j.plane)
		mean := sum / count
		variance := max(0, sq/count-mean*mean)
		b.batchMean[c] = float32(mean)
		b.batchInvStd[c] = float32(1 / math.Sqrt(variance+float64(b.cfg.Eps)))
		m := b.cfg.Momentum
		mm, mv := b.mean.Value.Data(), b.variance.Value.Data()
		mm[c] = m*mm[c] + (1-m)*float32(mean)
		mv[c] = m*mv[c] + (1-m)*float32(variance)
	}
	mean, invStd := j.stats(c)
	scale := float64(b.gamma.Value.Data()[c]) * invStd
	shift := float64(b.beta.Value.Data()[c]) - mean*scale
	s, t := float32(scale), float32(shift)
	for i := 0; i < j.n; i++ {
		var r []float32
		if j.residual != nil {
			r = j.planeOf(j.residual, i, c)
		}
		tensor.Affine(j.planeOf(y, i, c), j.planeOf(x, i, c), r, s, t, b.relu)
	}
}

func (j *bnJob) backwardChannel(c int) {
	b, x, dx := j.b, j.b.x.Data(), j.b.dx.Data()
	mean, invStd := j.stats(c)
	d := j.dy
	var out, mask []float32
	var sumDy, sumDyX float64
	for i := 0; i < j.n; i++ {
		if j.mask != nil {
			out, mask = j.planeOf(j.masked, i, c), j.planeOf(j.mask, i, c)
		}
		s, sx := tensor.GradSums(out, j.planeOf(j.dy, i, c), j.planeOf(x, i, c), mask)
		sumDy += s
		sumDyX += sx
	}
	if j.mask != nil {
		d = j.masked
	}
	// Σdy·xhat = invStd·(Σdy·x − mean·Σdy), the products exact in float64.
	sumDyXhat := invStd * (sumDyX - mean*sumDy)
	b.beta.Grad.Data()[c] = float32(sumDy)
	b.gamma.Grad.Data()[c] = float32(sumDyXhat)
	k := float64(b.gamma.Value.Data()[c]) * invStd
	if !j.train {
		// y = gamma·(x−mean)·invStd + beta with constant statistics.
		for i := 0; i < j.n; i++ {
			tensor.Affine(j.planeOf(dx, i, c), j.planeOf(d, i, c), nil, float32(k), 0, false)
		}
		return
	}
	// dx = k·(dy − mean(dy) − xhat·mean(dy·xhat)), xhat = (x−mean)·invStd.
	count := float64(j.n * j.plane)
	mDy, mDyXhat := sumDy/count, sumDyXhat/count
	a, bb, cc := float32(k), float32(-k*invStd*mDyXhat), float32(-k*mDy)
	for i := 0; i < j.n; i++ {
		tensor.LinearComb(j.planeOf(dx, i, c), j.planeOf(d, i, c), j.planeOf(x, i, c), a, bb, cc, float32(mean))
	}
}
