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
	b.x, b.trained = x, train
	b.job = bnJob{b: b, n: x.Dim(0), plane: x.Dim(2) * x.Dim(3), forward: true, train: train}
	b.dev.workers.For(b.cfg.Channels, 1, &b.job)
	b.job = bnJob{}
	return b.y, nil
}

// Backward writes the gamma and beta gradients and returns dL/dx. After an
// inference Forward the moving statistics are constants of the map.
func (b *BatchNorm2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := checkGrad("batchnorm", b.name, b.y, dy); err != nil {
		return nil, err
	}
	b.job = bnJob{b: b, n: b.x.Dim(0), plane: b.x.Dim(2) * b.x.Dim(3), dy: dy.Data(), train: b.trained}
	b.dev.workers.For(b.cfg.Channels, 1, &b.job)
	b.job = bnJob{}
	return b.dx, nil
}

// bnJob runs the forward or backward pass for channels lo..hi-1.
type bnJob struct {
	b              *BatchNorm2d
	n, plane       int
	dy             []float32
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

func (j *bnJob) forwardChannel(c int) {
	b, x, y := j.b, j.b.x.Data(), j.b.y.Data()
	stride, p := b.cfg.Channels*j.plane, j.plane
	if j.train {
		var sum float64
		for i := 0; i < j.n; i++ {
			for _, v := range x[i*stride+c*p : i*stride+(c+1)*p] {
				sum += float64(v)
			}
		}
		count := float64(j.n * p)
		mean := sum / count
		var sq float64
		for i := 0; i < j.n; i++ {
			for _, v := range x[i*stride+c*p : i*stride+(c+1)*p] {
				d := float64(v) - mean
				sq += d * d
			}
		}
		variance := sq / count
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
		xs := x[i*stride+c*p : i*stride+(c+1)*p]
		ys := y[i*stride+c*p : i*stride+(c+1)*p]
		for q, v := range xs {
			ys[q] = v*s + t
		}
	}
}

func (j *bnJob) backwardChannel(c int) {
	b, x, dx, dy := j.b, j.b.x.Data(), j.b.dx.Data(), j.dy
	stride, p := b.cfg.Channels*j.plane, j.plane
	mean, invStd := j.stats(c)
	var sumDy, sumDyXhat float64
	for i := 0; i < j.n; i++ {
		xs := x[i*stride+c*p : i*stride+(c+1)*p]
		ds := dy[i*stride+c*p : i*stride+(c+1)*p]
		for q, g := range ds {
			sumDy += float64(g)
			sumDyXhat += float64(g) * (float64(xs[q]) - mean) * invStd
		}
	}
	b.beta.Grad.Data()[c] = float32(sumDy)
	b.gamma.Grad.Data()[c] = float32(sumDyXhat)
	gamma := float64(b.gamma.Value.Data()[c])
	if !j.train {
		// y = gamma·(x−mean)·invStd + beta with constant statistics.
		k := float32(gamma * invStd)
		for i := 0; i < j.n; i++ {
			ds := dy[i*stride+c*p : i*stride+(c+1)*p]
			dxs := dx[i*stride+c*p : i*stride+(c+1)*p]
			for q, g := range ds {
				dxs[q] = g * k
			}
		}
		return
	}
	// dx = gamma·invStd·(dy − mean(dy) − xhat·mean(dy·xhat))
	count := float64(j.n * p)
	k := gamma * invStd
	mDy, mDyXhat := sumDy/count, sumDyXhat/count
	for i := 0; i < j.n; i++ {
		xs := x[i*stride+c*p : i*stride+(c+1)*p]
		ds := dy[i*stride+c*p : i*stride+(c+1)*p]
		dxs := dx[i*stride+c*p : i*stride+(c+1)*p]
		for q, g := range ds {
			xhat := (float64(xs[q]) - mean) * invStd
			dxs[q] = float32(k * (float64(g) - mDy - xhat*mDyXhat))
		}
	}
}
