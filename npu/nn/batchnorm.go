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
	// coef holds a pass's per-channel coefficients, coefPerChannel each;
	// sums the per-plane sums of one, [image][channel][2].
	coef    []float32
	sums    []float64
	trained bool
	relu    bool // the last forward was fused with a ReLU
	job     bnJob
	params  []*Param
	// reduce, when set, sums the per-plane sums over the other parts of
	// the same images (held elsewhere: an image split along H or W), of
	// which there are parts in all.
	reduce func(sums []float64) error
	parts  int
}

// SetStatsReducer makes training use the statistics of images of which
// this layer sees one of parts equal pieces: after each pass of per-plane
// sums (Σx and Σx² forward, Σdy and Σdy·x backward, [image][channel][2]),
// reduce replaces them with their sums over all the pieces. gamma's and
// beta's gradients are then those of the whole images.
func (b *BatchNorm2d) SetStatsReducer(parts int, reduce func(sums []float64) error) {
	b.parts, b.reduce = parts, reduce
}

// reduceSums runs the reducer, if any, and returns the factor from this
// layer's pixel count to the statistics' count.
func (b *BatchNorm2d) reduceSums() (int, error) {
	if b.reduce == nil {
		return 1, nil
	}
	if err := b.reduce(b.sums); err != nil {
		return 0, fmt.Errorf("batchnorm %s: %w", b.name, err)
	}
	return b.parts, nil
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
	b.coef = make([]float32, coefPerChannel*cfg.Channels)
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
	if b.y, err = b.dev.ensure(b.name, "output", b.y, x.Shape()...); err != nil {
		return nil, fmt.Errorf("batchnorm %s output: %w", b.name, err)
	}
	if b.dx, err = b.dev.ensure(b.name, "input gradient", b.dx, x.Shape()...); err != nil {
		return nil, fmt.Errorf("batchnorm %s input gradient: %w", b.name, err)
	}
	if residual != nil && len(residual) != x.Len() {
		return nil, fmt.Errorf("batchnorm %s: residual of %d elements for input %v: %w", b.name, len(residual), x.Shape(), tensor.ErrShape)
	}
	b.x, b.trained, b.relu = x, train, relu
	n := x.Dim(0)
	if len(b.sums) != 2*n*b.cfg.Channels {
		b.sums = make([]float64, 2*n*b.cfg.Channels)
	}
	b.job = bnJob{b: b, n: n, plane: x.Dim(2) * x.Dim(3), forward: true, train: train, residual: residual}
	if train {
		b.job.phase = bnSums
		b.dev.workers.For(n, 1, &b.job)
		parts, err := b.reduceSums()
		if err != nil {
			b.job = bnJob{}
			return nil, err
		}
		b.batchStats(n, parts*b.job.plane)
	}
	for c := 0; c < b.cfg.Channels; c++ {
		mean, invStd := b.job.stats(c)
		scale := float64(b.gamma.Value.Data()[c]) * invStd
		shift := float64(b.beta.Value.Data()[c]) - mean*scale
		b.coef[coefPerChannel*c], b.coef[coefPerChannel*c+1] = float32(scale), float32(shift)
	}
	b.job.phase = bnApply
	b.dev.workers.For(n, 1, &b.job)
	b.job = bnJob{}
	return b.y, nil
}

// batchStats turns the per-plane sums of x (n images of plane pixels per
// channel) into the batch mean and 1/sqrt(var+eps) of each channel and
// updates the moving statistics. Each channel's planes are added in image
// order, whoever summed them.
func (b *BatchNorm2d) batchStats(n, plane int) {
	ch, count := b.cfg.Channels, n*plane
	m := b.cfg.Momentum
	mm, mv := b.mean.Value.Data(), b.variance.Value.Data()
	for c := 0; c < ch; c++ {
		// One pass: Σx and Σx² in float64 lose nothing that matters unless
		// mean²/variance approaches 1e9.
		var sum, sq float64
		for i := 0; i < n; i++ {
			sum += b.sums[2*(i*ch+c)]
			sq += b.sums[2*(i*ch+c)+1]
		}
		mean := sum / float64(count)
		variance := max(0, sq/float64(count)-mean*mean)
		b.batchMean[c] = float32(mean)
		b.batchInvStd[c] = float32(1 / math.Sqrt(variance+float64(b.cfg.Eps)))
		mm[c] = m*mm[c] + (1-m)*float32(mean)
		mv[c] = m*mv[c] + (1-m)*float32(variance)
	}
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
	n, ch := b.x.Dim(0), b.cfg.Channels
	b.job = bnJob{b: b, n: n, plane: b.x.Dim(2) * b.x.Dim(3), dy: dy.Data(), train: b.trained}
	if b.relu {
		b.job.mask, b.job.masked = b.y.Data(), b.dx.Data()
		if masked != nil {
			b.job.masked = masked[:dy.Len()]
		}
	}
	b.job.phase = bnSums
	b.dev.workers.For(n, 1, &b.job)
	parts := 1
	if b.trained {
		var err error
		if parts, err = b.reduceSums(); err != nil {
			b.job = bnJob{}
			return nil, err
		}
	}
	count := float64(n * parts * b.job.plane)
	for c := 0; c < ch; c++ {
		mean, invStd := b.job.stats(c)
		var sumDy, sumDyX float64
		for i := 0; i < n; i++ {
			sumDy += b.sums[2*(i*ch+c)]
			sumDyX += b.sums[2*(i*ch+c)+1]
		}
		// Σdy·xhat = invStd·(Σdy·x − mean·Σdy), the products exact in float64.
		sumDyXhat := invStd * (sumDyX - mean*sumDy)
		b.beta.Grad.Data()[c] = float32(sumDy)
		b.gamma.Grad.Data()[c] = float32(sumDyXhat)
		k := float64(b.gamma.Value.Data()[c]) * invStd
		co := b.coef[coefPerChannel*c : coefPerChannel*(c+1)]
		if !b.trained {
			// y = gamma·(x−mean)·invStd + beta with constant statistics.
			co[0] = float32(k)
			continue
		}
		// dx = k·(dy − mean(dy) − xhat·mean(dy·xhat)), xhat = (x−mean)·invStd.
		mDy, mDyXhat := sumDy/count, sumDyXhat/count
		co[0], co[1], co[2], co[3] = float32(k), float32(-k*invStd*mDyXhat), float32(-k*mDy), float32(mean)
	}
	b.job.phase = bnApply
	b.dev.workers.For(n, 1, &b.job)
	b.job = bnJob{}
	return b.dx, nil
}

// coefPerChannel is how many coefficients a pass keeps per channel: the
// forward's scale and shift, the backward's LinearComb a, b, c and mean.
const coefPerChannel = 4

// Passes of bnJob: per-plane sums, then the per-plane map that uses the
// per-channel coefficients derived from them.
const (
	bnSums = iota
	bnApply
)

// bnJob runs one pass of the forward or backward over images lo..hi-1, all
// channels, so each worker keeps to the same images as the convolutions
// around it. Statistics over the batch are per-plane sums that batchStats
// and backward add up per channel in image order afterwards, so they do
// not depend on which worker ran which image.
type bnJob struct {
	b              *BatchNorm2d
	n, plane       int
	dy             []float32
	residual       []float32
	mask, masked   []float32 // backward through a fused ReLU: its output, and where the masked dy goes
	forward, train bool
	phase          int
}

func (j *bnJob) Range(lo, hi int) {
	b := j.b
	ch := b.cfg.Channels
	x := b.x.Data()
	for i := lo; i < hi; i++ {
		for c := 0; c < ch; c++ {
			off := (i*ch + c) * j.plane
			xp := x[off : off+j.plane]
			co := b.coef[coefPerChannel*c : coefPerChannel*(c+1)]
			sums := b.sums[2*(i*ch+c) : 2*(i*ch+c)+2]
			switch {
			case j.forward && j.phase == bnSums:
				sums[0], sums[1] = tensor.SumSquares(xp)
			case j.forward:
				var r []float32
				if j.residual != nil {
					r = j.residual[off : off+j.plane]
				}
				tensor.Affine(b.y.Data()[off:off+j.plane], xp, r, co[0], co[1], b.relu)
			case j.phase == bnSums:
				var out, mask []float32
				if j.mask != nil {
					out, mask = j.masked[off:off+j.plane], j.mask[off:off+j.plane]
				}
				sums[0], sums[1] = tensor.GradSums(out, j.dy[off:off+j.plane], xp, mask)
			default:
				d := j.dy
				if j.mask != nil {
					d = j.masked
				}
				dx := b.dx.Data()[off : off+j.plane]
				if !j.train {
					tensor.Affine(dx, d[off:off+j.plane], nil, co[0], 0, false)
				} else {
					tensor.LinearComb(dx, d[off:off+j.plane], xp, co[0], co[1], co[2], co[3])
				}
			}
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
