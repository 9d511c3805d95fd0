package nn

import (
	"math"

	"github.com/mspipe/mspipe/npu/tensor"
)

// Float64 reference implementations of every layer, written as the plain
// definitions. The gradient checks differentiate them numerically and
// compare with the float32 layers' analytic backward passes.

type ref4 struct {
	d          []float64
	n, c, h, w int
}

func (r ref4) at(n, c, h, w int) float64 { return r.d[((n*r.c+c)*r.h+h)*r.w+w] }

func refConv(x ref4, weight, bias []float64, cout, k, stride int, pad tensor.Padding) ref4 {
	g, err := tensor.NewConvGeom(x.c, x.h, x.w, k, k, stride, stride, pad)
	if err != nil {
		panic(err)
	}
	y := ref4{d: make([]float64, x.n*cout*g.OutH*g.OutW), n: x.n, c: cout, h: g.OutH, w: g.OutW}
	for n := 0; n < x.n; n++ {
		for o := 0; o < cout; o++ {
			for oh := 0; oh < g.OutH; oh++ {
				for ow := 0; ow < g.OutW; ow++ {
					var s float64
					if bias != nil {
						s = bias[o]
					}
					for c := 0; c < x.c; c++ {
						for kh := 0; kh < k; kh++ {
							for kw := 0; kw < k; kw++ {
								ih, iw := oh*stride-g.PadTop+kh, ow*stride-g.PadLeft+kw
								if ih >= 0 && ih < x.h && iw >= 0 && iw < x.w {
									s += x.at(n, c, ih, iw) * weight[((o*x.c+c)*k+kh)*k+kw]
								}
							}
						}
					}
					y.d[((n*cout+o)*y.h+oh)*y.w+ow] = s
				}
			}
		}
	}
	return y
}

func refBN(x ref4, p map[string][]float64, name string, eps float64, train bool) ref4 {
	gamma, beta := p[name+".gamma"], p[name+".beta"]
	y := ref4{d: make([]float64, len(x.d)), n: x.n, c: x.c, h: x.h, w: x.w}
	hw := x.h * x.w
	for c := 0; c < x.c; c++ {
		mean, variance := p[name+".moving_mean"][c], p[name+".moving_variance"][c]
		if train {
			var s, sq float64
			for n := 0; n < x.n; n++ {
				for q := 0; q < hw; q++ {
					s += x.d[(n*x.c+c)*hw+q]
				}
			}
			mean = s / float64(x.n*hw)
			for n := 0; n < x.n; n++ {
				for q := 0; q < hw; q++ {
					d := x.d[(n*x.c+c)*hw+q] - mean
					sq += d * d
				}
			}
			variance = sq / float64(x.n*hw)
		}
		for n := 0; n < x.n; n++ {
			for q := 0; q < hw; q++ {
				i := (n*x.c+c)*hw + q
				y.d[i] = gamma[c]*(x.d[i]-mean)/math.Sqrt(variance+eps) + beta[c]
			}
		}
	}
	return y
}

func refReLU(x ref4) ref4 {
	y := x
	y.d = make([]float64, len(x.d))
	for i, v := range x.d {
		y.d[i] = math.Max(v, 0)
	}
	return y
}

func refAdd(a, b ref4) ref4 {
	y := a
	y.d = make([]float64, len(a.d))
	for i := range a.d {
		y.d[i] = a.d[i] + b.d[i]
	}
	return y
}

func refMaxPool(x ref4, k, stride int, pad tensor.Padding) ref4 {
	g, err := tensor.NewConvGeom(1, x.h, x.w, k, k, stride, stride, pad)
	if err != nil {
		panic(err)
	}
	y := ref4{d: make([]float64, x.n*x.c*g.OutH*g.OutW), n: x.n, c: x.c, h: g.OutH, w: g.OutW}
	for n := 0; n < x.n; n++ {
		for c := 0; c < x.c; c++ {
			for oh := 0; oh < g.OutH; oh++ {
				for ow := 0; ow < g.OutW; ow++ {
					best := math.Inf(-1)
					for kh := 0; kh < k; kh++ {
						for kw := 0; kw < k; kw++ {
							ih, iw := oh*stride-g.PadTop+kh, ow*stride-g.PadLeft+kw
							if ih >= 0 && ih < x.h && iw >= 0 && iw < x.w {
								best = math.Max(best, x.at(n, c, ih, iw))
							}
						}
					}
					y.d[((n*x.c+c)*y.h+oh)*y.w+ow] = best
				}
			}
		}
	}
	return y
}

func refGAP(x ref4) ref4 {
	y := ref4{d: make([]float64, x.n*x.c), n: x.n, c: x.c, h: 1, w: 1}
	hw := x.h * x.w
	for i := range y.d {
		for q := 0; q < hw; q++ {
			y.d[i] += x.d[i*hw+q]
		}
		y.d[i] /= float64(hw)
	}
	return y
}

func refDense(x []float64, n, in, out int, w, b []float64) []float64 {
	y := make([]float64, n*out)
	for i := 0; i < n; i++ {
		for o := 0; o < out; o++ {
			s := 0.0
			if b != nil {
				s = b[o]
			}
			for j := 0; j < in; j++ {
				s += x[i*in+j] * w[o*in+j]
			}
			y[i*out+o] = s
		}
	}
	return y
}

func padSame() tensor.Padding { return tensor.Padding{Mode: tensor.PadSame} }

func refBasicBlock(x ref4, p map[string][]float64, name string, cfg BlockConfig, train bool) ref4 {
	eps := float64(cfg.BNEps)
	h := refReLU(refBN(refConv(x, p[name+".conv1.weight"], nil, cfg.Out, 3, cfg.Stride, padSame()), p, name+".bn1d", eps, train))
	h = refBN(refConv(h, p[name+".conv2.weight"], nil, cfg.Out, 3, 1, padSame()), p, name+".bn2d", eps, train)
	return refReLU(refAdd(h, refShortcut(x, p, name, cfg, train)))
}

func refBottleneck(x ref4, p map[string][]float64, name string, cfg BlockConfig, train bool) ref4 {
	eps, mid := float64(cfg.BNEps), cfg.Out/4
	h := refReLU(refBN(refConv(x, p[name+".conv1.weight"], nil, mid, 1, 1, padSame()), p, name+".bn1", eps, train))
	h = refReLU(refBN(refConv(h, p[name+".conv2.weight"], nil, mid, 3, cfg.Stride, padSame()), p, name+".bn2", eps, train))
	h = refBN(refConv(h, p[name+".conv3.weight"], nil, cfg.Out, 1, 1, padSame()), p, name+".bn3", eps, train)
	return refReLU(refAdd(h, refShortcut(x, p, name, cfg, train)))
}

func refShortcut(x ref4, p map[string][]float64, name string, cfg BlockConfig, train bool) ref4 {
	if cfg.Stride == 1 && cfg.In == cfg.Out {
		return x
	}
	s := refConv(x, p[name+".down_sample_layer.0.weight"], nil, cfg.Out, 1, cfg.Stride, padSame())
	return refBN(s, p, name+".down_sample_layer.1", float64(cfg.BNEps), train)
}

// refCrossEntropy is the seeds' SoftmaxCrossEntropyExpand in float64.
func refCrossEntropy(logits []float64, n, c int, labels []int32) float64 {
	var total float64
	for i := 0; i < n; i++ {
		row := logits[i*c : (i+1)*c]
		m := row[0]
		for _, v := range row {
			m = math.Max(m, v)
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(v - m)
		}
		total -= math.Log(math.Exp(row[labels[i]]-m)/sum + 1e-24)
	}
	return total / float64(n)
}
