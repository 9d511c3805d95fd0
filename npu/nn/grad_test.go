package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/tensor"
)

// refFn is a float64 reference forward pass of a layer: input (flat, in the
// layer's input shape) and parameters by name in, output (flat) out.
type refFn func(x []float64, p map[string][]float64) []float64

type gradCase struct {
	name  string
	layer func(t *testing.T, dev *Device) Layer
	shape []int
	train bool
	ref   refFn
}

const (
	fwdTol  = 1e-4 // float32 forward vs float64 reference, relative to the output scale
	gradTol = 2e-3 // float32 backward vs float64 central differences, relative
	fdStep  = 1e-6
)

func randTensor(t *testing.T, r *rand.Rand, shape ...int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.New(shape...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.Data() {
		x.Data()[i] = float32(r.NormFloat64())
	}
	return x
}

func to64(s []float32) []float64 {
	d := make([]float64, len(s))
	for i, v := range s {
		d[i] = float64(v)
	}
	return d
}

// randomizeParams gives every parameter random values (moving variances stay
// positive) so the checks do not run at the special point of the defaults.
func randomizeParams(r *rand.Rand, ps []*Param) {
	for _, p := range ps {
		for i := range p.Value.Data() {
			v := 0.5 * r.NormFloat64()
			switch {
			case strings.HasSuffix(p.Name, ".moving_variance"):
				v = 0.5 + r.Float64()
			case strings.HasSuffix(p.Name, ".gamma"):
				v = 1 + 0.3*r.NormFloat64()
			}
			p.Value.Data()[i] = float32(v)
		}
	}
}

// maxRelErr returns max|got−want| / max(max|want|, floor).
func maxRelErr(got []float32, want []float64, floor float64) float64 {
	scale, diff := floor, 0.0
	for i, w := range want {
		scale = math.Max(scale, math.Abs(w))
		diff = math.Max(diff, math.Abs(float64(got[i])-w))
	}
	return diff / scale
}

func dot(a []float64, b []float32) float64 {
	var s float64
	for i := range a {
		s += a[i] * float64(b[i])
	}
	return s
}

func runGradCheck(t *testing.T, tc gradCase, dev *Device) {
	r := rand.New(rand.NewPCG(11, uint64(len(tc.name))))
	layer := tc.layer(t, dev)
	randomizeParams(r, layer.Params())
	x := randTensor(t, r, tc.shape...)
	x64 := to64(x.Data())
	p64 := map[string][]float64{}
	for _, p := range layer.Params() {
		p64[p.Name] = to64(p.Value.Data())
	}
	y, err := layer.Forward(x, tc.train)
	if err != nil {
		t.Fatal(err)
	}
	want := tc.ref(x64, p64)
	if len(want) != y.Len() {
		t.Fatalf("output %v has %d elements, reference %d", y.Shape(), y.Len(), len(want))
	}
	if e := maxRelErr(y.Data(), want, 1); e > fwdTol {
		t.Fatalf("forward differs from the float64 reference: relative error %g", e)
	}
	up := randTensor(t, r, y.Shape()...)
	dx, err := layer.Backward(up)
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.SameShape(dx, x) {
		t.Fatalf("dx shape %v, want %v", dx.Shape(), x.Shape())
	}
	loss := func() float64 { return dot(tc.ref(x64, p64), up.Data()) }
	numeric := func(v []float64) []float64 {
		g := make([]float64, len(v))
		for i := range v {
			old := v[i]
			v[i] = old + fdStep
			lp := loss()
			v[i] = old - fdStep
			lm := loss()
			v[i] = old
			g[i] = (lp - lm) / (2 * fdStep)
		}
		return g
	}
	if e := maxRelErr(dx.Data(), numeric(x64), 1e-3); e > gradTol {
		t.Errorf("dL/dx: relative error %g against central differences", e)
	}
	for _, p := range layer.Params() {
		if !p.Trainable {
			if p.Grad != nil {
				t.Errorf("%s is not trainable but has a gradient", p.Name)
			}
			continue
		}
		if e := maxRelErr(p.Grad.Data(), numeric(p64[p.Name]), 1e-3); e > gradTol {
			t.Errorf("dL/d%s: relative error %g against central differences", p.Name, e)
		}
	}
}

func gradCases() []gradCase {
	conv := func(cfg Conv2dConfig, chunkFloats, shiftMinIn int) func(*testing.T, *Device) Layer {
		return func(t *testing.T, dev *Device) Layer {
			c, err := NewConv2d("c", cfg, 1, dev)
			if err != nil {
				t.Fatal(err)
			}
			if chunkFloats > 0 {
				c.chunkFloats = chunkFloats
			}
			if shiftMinIn > 0 {
				c.shiftMinIn = shiftMinIn
			}
			return c
		}
	}
	convRef := func(n, h, w int, cfg Conv2dConfig) refFn {
		return func(x []float64, p map[string][]float64) []float64 {
			return refConv(ref4{x, n, cfg.In, h, w}, p["c.weight"], p["c.bias"], cfg.Out, cfg.Kernel, cfg.Stride, cfg.Pad).d
		}
	}
	var cases []gradCase
	for _, cc := range []struct {
		name        string
		cfg         Conv2dConfig
		n, h, w     int
		chunkFloats int
		shiftMinIn  int // 0: the default; 1 forces the shift kernels, 1000 im2col
	}{
		{"conv3x3_same", Conv2dConfig{In: 3, Out: 4, Kernel: 3, Stride: 1}, 2, 6, 5, 0, 0},
		{"conv3x3_s2_same", Conv2dConfig{In: 2, Out: 3, Kernel: 3, Stride: 2}, 2, 7, 6, 0, 0},
		{"conv1x1_s2", Conv2dConfig{In: 4, Out: 3, Kernel: 1, Stride: 2}, 2, 5, 5, 0, 0},
		{"conv7x7_s2_same", Conv2dConfig{In: 2, Out: 2, Kernel: 7, Stride: 2}, 1, 9, 8, 0, 0},
		{"conv_pad_bias", Conv2dConfig{In: 2, Out: 3, Kernel: 3, Stride: 2, HasBias: true,
			Pad: tensor.Padding{Mode: tensor.PadExplicit, Top: 1, Bottom: 2, Left: 0, Right: 1}}, 2, 5, 6, 0, 0},
		{"conv_valid", Conv2dConfig{In: 2, Out: 2, Kernel: 3, Stride: 1, Pad: tensor.Padding{Mode: tensor.PadValid}}, 2, 5, 5, 0, 0},
		// One image per chunk: the weight gradient accumulates over chunks.
		{"conv_chunked", Conv2dConfig{In: 3, Out: 4, Kernel: 3, Stride: 1, HasBias: true}, 3, 5, 5, 1, 0},
		// 3×3 stride-1 pad-1 convolutions through the shift kernels: forced
		// for few channels, by default from 8, rows of 8 (the assembly
		// layout copies) and with a bias; and the same shape through im2col.
		{"conv3x3_shift_forced", Conv2dConfig{In: 3, Out: 4, Kernel: 3, Stride: 1}, 2, 6, 5, 0, 1},
		{"conv3x3_shift", Conv2dConfig{In: 8, Out: 5, Kernel: 3, Stride: 1}, 2, 3, 8, 0, 0},
		{"conv3x3_shift_bias", Conv2dConfig{In: 2, Out: 3, Kernel: 3, Stride: 1, HasBias: true,
			Pad: tensor.Padding{Mode: tensor.PadExplicit, Top: 1, Bottom: 1, Left: 1, Right: 1}}, 2, 4, 3, 0, 1},
		{"conv3x3_im2col", Conv2dConfig{In: 8, Out: 5, Kernel: 3, Stride: 1}, 2, 3, 8, 0, 1000},
		// 3×3 stride-2 convolutions of even-sized inputs through the shift
		// kernels (the input in four phases): "same" padding by default,
		// one pixel before with a bias forced, and the first through im2col.
		{"conv3x3_s2_shift", Conv2dConfig{In: 8, Out: 5, Kernel: 3, Stride: 2}, 2, 6, 8, 0, 0},
		{"conv3x3_s2_shift_pad1_bias", Conv2dConfig{In: 3, Out: 4, Kernel: 3, Stride: 2, HasBias: true,
			Pad: tensor.Padding{Mode: tensor.PadExplicit, Top: 1, Bottom: 1, Left: 1, Right: 0}}, 2, 4, 6, 0, 1},
		{"conv3x3_s2_im2col", Conv2dConfig{In: 8, Out: 5, Kernel: 3, Stride: 2}, 2, 6, 8, 0, 1000},
	} {
		cases = append(cases, gradCase{cc.name, conv(cc.cfg, cc.chunkFloats, cc.shiftMinIn), []int{cc.n, cc.cfg.In, cc.h, cc.w}, true, convRef(cc.n, cc.h, cc.w, cc.cfg)})
	}
	for _, train := range []bool{true, false} {
		cases = append(cases, gradCase{fmt.Sprintf("batchnorm_train_%t", train),
			func(t *testing.T, dev *Device) Layer {
				b, err := NewBatchNorm2d("bn", BatchNorm2dConfig{Channels: 3, Eps: 1e-5, Momentum: 0.9}, dev)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}, []int{3, 3, 2, 3}, train,
			func(x []float64, p map[string][]float64) []float64 {
				return refBN(ref4{x, 3, 3, 2, 3}, p, "bn", 1e-5, train).d
			}})
	}
	for _, train := range []bool{true, false} {
		// A BatchNorm2d followed by a ReLU runs fused inside a Sequential.
		cases = append(cases, gradCase{fmt.Sprintf("batchnorm_relu_train_%t", train),
			func(t *testing.T, dev *Device) Layer {
				b, err := NewBatchNorm2d("bn", BatchNorm2dConfig{Channels: 3, Eps: 1e-5, Momentum: 0.9}, dev)
				if err != nil {
					t.Fatal(err)
				}
				return NewSequential("s", b, NewReLU("r", dev))
			}, []int{2, 3, 3, 6}, train,
			func(x []float64, p map[string][]float64) []float64 {
				return refReLU(refBN(ref4{x, 2, 3, 3, 6}, p, "bn", 1e-5, train)).d
			}})
	}
	cases = append(cases,
		gradCase{"relu", func(t *testing.T, dev *Device) Layer { return NewReLU("r", dev) }, []int{2, 3, 4, 5}, true,
			func(x []float64, p map[string][]float64) []float64 { return refReLU(ref4{x, 2, 3, 4, 5}).d }},
		gradCase{"maxpool3x3_s2_same", func(t *testing.T, dev *Device) Layer {
			m, err := NewMaxPool2d("m", 3, 2, padSame(), dev)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, []int{2, 2, 7, 6}, true, func(x []float64, p map[string][]float64) []float64 {
			return refMaxPool(ref4{x, 2, 2, 7, 6}, 3, 2, padSame()).d
		}},
		gradCase{"maxpool2x2_valid", func(t *testing.T, dev *Device) Layer {
			m, err := NewMaxPool2d("m", 2, 2, tensor.Padding{Mode: tensor.PadValid}, dev)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, []int{1, 3, 5, 4}, true, func(x []float64, p map[string][]float64) []float64 {
			return refMaxPool(ref4{x, 1, 3, 5, 4}, 2, 2, tensor.Padding{Mode: tensor.PadValid}).d
		}},
		gradCase{"avgpool_flatten", func(t *testing.T, dev *Device) Layer {
			return NewSequential("head", NewGlobalAvgPool("mean"), NewFlatten("flatten"))
		}, []int{2, 3, 4, 4}, true, func(x []float64, p map[string][]float64) []float64 {
			return refGAP(ref4{x, 2, 3, 4, 4}).d
		}},
		gradCase{"dense", func(t *testing.T, dev *Device) Layer {
			d, err := NewDense("fc", 5, 4, true, 1, dev)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}, []int{3, 5}, true, func(x []float64, p map[string][]float64) []float64 {
			return refDense(x, 3, 5, 4, p["fc.weight"], p["fc.bias"])
		}},
	)
	for _, bc := range []struct {
		name       string
		bottleneck bool
		cfg        BlockConfig
		n, h, w    int
	}{
		{"basic_identity", false, BlockConfig{In: 3, Out: 3, Stride: 1, BNEps: 1e-5, BNMomentum: 0.9}, 2, 4, 4},
		{"basic_downsample", false, BlockConfig{In: 2, Out: 4, Stride: 2, BNEps: 1e-5, BNMomentum: 0.9}, 2, 5, 5},
		// The stride-2 convolution through the shift kernels, its input
		// gradient summed with the shortcut's.
		{"basic_downsample_shift", false, BlockConfig{In: 8, Out: 8, Stride: 2, BNEps: 1e-5, BNMomentum: 0.9}, 2, 4, 4},
		{"bottleneck_downsample", true, BlockConfig{In: 4, Out: 8, Stride: 2, BNEps: 1e-4, BNMomentum: 0.9}, 2, 5, 4},
		{"bottleneck_identity", true, BlockConfig{In: 8, Out: 8, Stride: 1, BNEps: 1e-4, BNMomentum: 0.9}, 2, 3, 3},
	} {
		cases = append(cases, gradCase{bc.name, func(t *testing.T, dev *Device) Layer {
			build := NewBasicBlock
			if bc.bottleneck {
				build = NewBottleneck
			}
			b, err := build("layer1.0", bc.cfg, 3, dev)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, []int{bc.n, bc.cfg.In, bc.h, bc.w}, true, func(x []float64, p map[string][]float64) []float64 {
			in := ref4{x, bc.n, bc.cfg.In, bc.h, bc.w}
			if bc.bottleneck {
				return refBottleneck(in, p, "layer1.0", bc.cfg, true).d
			}
			return refBasicBlock(in, p, "layer1.0", bc.cfg, true).d
		}})
	}
	return cases
}

func TestLayerGradients(t *testing.T) {
	for _, threads := range []int{1, 2} {
		dev := NewDevice(threads)
		for _, tc := range gradCases() {
			t.Run(fmt.Sprintf("%s/threads%d", tc.name, threads), func(t *testing.T) { runGradCheck(t, tc, dev) })
		}
		dev.Close()
	}
}

func TestSoftmaxCrossEntropyGradient(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const n, c = 4, 5
	logits := randTensor(t, r, n, c)
	for i := range logits.Data() {
		logits.Data()[i] *= 3
	}
	labels := []int32{0, 4, 2, 2}
	l := NewSoftmaxCrossEntropyExpand()
	got, err := l.Forward(logits, labels)
	if err != nil {
		t.Fatal(err)
	}
	x64 := to64(logits.Data())
	if want := refCrossEntropy(x64, n, c, labels); math.Abs(float64(got)-want) > 1e-6*(1+want) {
		t.Fatalf("loss %g, reference %g", got, want)
	}
	dx, err := l.Backward()
	if err != nil {
		t.Fatal(err)
	}
	num := make([]float64, len(x64))
	for i := range x64 {
		old := x64[i]
		x64[i] = old + fdStep
		lp := refCrossEntropy(x64, n, c, labels)
		x64[i] = old - fdStep
		lm := refCrossEntropy(x64, n, c, labels)
		x64[i] = old
		num[i] = (lp - lm) / (2 * fdStep)
	}
	if e := maxRelErr(dx.Data(), num, 1e-3); e > gradTol {
		t.Fatalf("dL/dlogits: relative error %g", e)
	}
}

// TestConvKernelChoice pins which convolutions take the shift kernels, so
// the gradient cases above cover both paths.
func TestConvKernelChoice(t *testing.T) {
	dev := NewDevice(1)
	defer dev.Close()
	for _, tc := range []struct {
		name       string
		cfg        Conv2dConfig
		shiftMinIn int
		h          int // input height; the width is 6
		shift      bool
	}{
		{"3x3_same_8ch", Conv2dConfig{In: 8, Out: 5, Kernel: 3, Stride: 1}, 0, 5, true},
		{"3x3_same_3ch", Conv2dConfig{In: 3, Out: 4, Kernel: 3, Stride: 1}, 0, 5, false},
		{"3x3_same_3ch_forced", Conv2dConfig{In: 3, Out: 4, Kernel: 3, Stride: 1}, 1, 5, true},
		{"3x3_explicit_1111", Conv2dConfig{In: 8, Out: 2, Kernel: 3, Stride: 1, Pad: tensor.Padding{Mode: tensor.PadExplicit, Top: 1, Bottom: 1, Left: 1, Right: 1}}, 0, 5, true},
		{"3x3_explicit_uneven", Conv2dConfig{In: 8, Out: 2, Kernel: 3, Stride: 1, Pad: tensor.Padding{Mode: tensor.PadExplicit, Top: 1, Bottom: 2, Left: 1, Right: 1}}, 0, 5, false},
		{"3x3_stride2_odd", Conv2dConfig{In: 8, Out: 2, Kernel: 3, Stride: 2}, 0, 5, false},
		{"3x3_stride2_even", Conv2dConfig{In: 8, Out: 2, Kernel: 3, Stride: 2}, 0, 6, true},
		{"3x3_stride2_even_3ch", Conv2dConfig{In: 3, Out: 2, Kernel: 3, Stride: 2}, 0, 6, false},
		{"3x3_stride2_explicit_1111", Conv2dConfig{In: 8, Out: 2, Kernel: 3, Stride: 2, Pad: tensor.Padding{Mode: tensor.PadExplicit, Top: 1, Bottom: 1, Left: 1, Right: 1}}, 0, 6, true},
		{"3x3_stride2_explicit_2020", Conv2dConfig{In: 8, Out: 2, Kernel: 3, Stride: 2, Pad: tensor.Padding{Mode: tensor.PadExplicit, Top: 2, Bottom: 0, Left: 2, Right: 0}}, 0, 6, false},
		{"3x3_valid", Conv2dConfig{In: 8, Out: 2, Kernel: 3, Stride: 1, Pad: tensor.Padding{Mode: tensor.PadValid}}, 0, 5, false},
		{"1x1", Conv2dConfig{In: 8, Out: 2, Kernel: 1, Stride: 1}, 0, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewConv2d("c", tc.cfg, 1, dev)
			if err != nil {
				t.Fatal(err)
			}
			if tc.shiftMinIn > 0 {
				c.shiftMinIn = tc.shiftMinIn
			}
			x, _ := tensor.New(2, tc.cfg.In, tc.h, 6)
			if _, err := c.Forward(x, true); err != nil {
				t.Fatal(err)
			}
			if got := c.shift != nil; got != tc.shift {
				t.Fatalf("shift kernels used: %t, want %t", got, tc.shift)
			}
		})
	}
}
