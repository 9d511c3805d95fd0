package nn

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/golden"

	"github.com/mspipe/mspipe/npu/tensor"
)

// refResNet is the float64 reference of NewResNet20 / NewResNet50.
func refResNet(x ref4, p map[string][]float64, name string, classes int, train bool) []float64 {
	var h ref4
	var in int
	switch name {
	case "resnet20":
		h = refReLU(refBN(refConv(x, p["conv1.weight"], nil, 16, 3, 1, padSame()), p, "bn1", 1e-5, train))
		in = 16
		for s, st := range []struct{ out, stride int }{{16, 1}, {32, 2}, {64, 2}} {
			for b := 0; b < 3; b++ {
				cfg := BlockConfig{In: in, Out: st.out, Stride: st.stride, BNEps: 1e-5}
				if b > 0 {
					cfg.Stride = 1
				}
				h = refBasicBlock(h, p, fmt.Sprintf("layer%d.%d", s+1, b), cfg, train)
				in = st.out
			}
		}
	case "resnet50":
		h = refReLU(refBN(refConv(x, p["conv1.weight"], nil, 64, 7, 2, padSame()), p, "bn1", 1e-4, train))
		h = refMaxPool(h, 3, 2, padSame())
		in = 64
		for s, st := range []struct{ blocks, out, stride int }{{3, 256, 1}, {4, 512, 2}, {6, 1024, 2}, {3, 2048, 2}} {
			for b := 0; b < st.blocks; b++ {
				cfg := BlockConfig{In: in, Out: st.out, Stride: st.stride, BNEps: 1e-4}
				if b > 0 {
					cfg.Stride = 1
				}
				h = refBottleneck(h, p, fmt.Sprintf("layer%d.%d", s+1, b), cfg, train)
				in = st.out
			}
		}
	}
	return refDense(refGAP(h).d, x.n, in, classes, p["end_point.weight"], p["end_point.bias"])
}

func paramMap(ps []*Param) map[string][]float64 {
	m := map[string][]float64{}
	for _, p := range ps {
		m[p.Name] = to64(p.Value.Data())
	}
	return m
}

func paramListing(m *Model) []byte {
	var b bytes.Buffer
	for _, p := range m.Params() {
		fmt.Fprintf(&b, "%s %v %s trainable=%t\n", p.Name, p.Shape(), DType, p.Trainable)
	}
	return b.Bytes()
}

func countParams(m *Model) (entries, trainableEntries, trainableElems, otherElems int) {
	for _, p := range m.Params() {
		entries++
		if p.Trainable {
			trainableEntries++
			trainableElems += p.Value.Len()
		} else {
			otherElems += p.Value.Len()
		}
	}
	return
}

func TestResNet20Structure(t *testing.T) {
	m, err := NewResNet20(ResNetConfig{Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	entries, te, telems, other := countParams(m)
	// 21 convolutions, 21 BatchNorms (4 parameters each), end_point weight+bias;
	// 272,474 trainable values (He et al.'s ResNet-20 with 1×1 projection
	// shortcuts and a 10-class head), 2×784 moving statistics.
	if entries != 107 || te != 65 || telems != 272474 || other != 1568 {
		t.Fatalf("resnet20: %d entries, %d trainable (%d values), %d other values", entries, te, telems, other)
	}
	if len(m.Grads()) != telems || len(m.Values()) != telems+other {
		t.Fatalf("flat grads %d, values %d", len(m.Grads()), len(m.Values()))
	}
	names := []string{}
	for _, p := range m.Params()[:12] {
		names = append(names, p.Name)
	}
	want := []string{"conv1.weight", "bn1.moving_mean", "bn1.moving_variance", "bn1.gamma", "bn1.beta",
		"layer1.0.conv1.weight", "layer1.0.bn1d.moving_mean", "layer1.0.bn1d.moving_variance", "layer1.0.bn1d.gamma",
		"layer1.0.bn1d.beta", "layer1.0.conv2.weight", "layer1.0.bn2d.moving_mean"}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("first parameters %v, want %v", names, want)
	}
	golden.Check(t, filepath.Join("testdata", "resnet20_params.golden"), paramListing(m))
}

func TestResNet50Structure(t *testing.T) {
	m, err := NewResNet50(ResNetConfig{Seed: 1, NumClasses: 10, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	entries, te, telems, _ := countParams(m)
	// 53 convolutions, 53 BatchNorms, end_point: 161 trainable tensors with
	// 23,528,522 values (25,557,032 of the 1000-class ResNet-50 minus the
	// difference in the head).
	if entries != 267 || te != 161 || telems != 23528522 {
		t.Fatalf("resnet50: %d entries, %d trainable (%d values)", entries, te, telems)
	}
	golden.Check(t, filepath.Join("testdata", "resnet50_params.golden"), paramListing(m))

	// One forward pass on a small image against the float64 reference checks
	// the wiring: pads, strides, max pool, shortcuts, head.
	r := rand.New(rand.NewPCG(31, 32))
	x := randTensor(t, r, 1, 3, 32, 32)
	p := paramMap(m.Params())
	logits, err := m.Forward(x, false)
	if err != nil {
		t.Fatal(err)
	}
	if !logits.HasShape(1, 10) {
		t.Fatalf("logits %v, want [1 10]", logits.Shape())
	}
	want := refResNet(ref4{to64(x.Data()), 1, 3, 32, 32}, p, "resnet50", 10, false)
	if e := maxRelErr(logits.Data(), want, 1e-2); e > 1e-3 {
		t.Fatalf("resnet50 logits differ from the float64 reference: relative error %g", e)
	}
}

// TestResNet20MatchesReference compares logits with the float64 reference and
// checks the whole model's gradient along random directions against central
// differences of the reference.
func TestResNet20MatchesReference(t *testing.T) {
	const n, classes = 2, 4
	m, err := NewResNet20(ResNetConfig{Seed: 7, NumClasses: classes, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := rand.New(rand.NewPCG(41, 42))
	randomizeParams(r, m.Params())
	x := randTensor(t, r, n, 3, 8, 8)
	labels := []int32{1, 3}
	p := paramMap(m.Params())
	x64 := ref4{to64(x.Data()), n, 3, 8, 8}

	logits, err := m.Forward(x, true)
	if err != nil {
		t.Fatal(err)
	}
	want := refResNet(x64, p, "resnet20", classes, true)
	if e := maxRelErr(logits.Data(), want, 1); e > 1e-3 {
		t.Fatalf("logits differ from the float64 reference: relative error %g", e)
	}
	loss := NewSoftmaxCrossEntropyExpand()
	if _, err := loss.Forward(logits, labels); err != nil {
		t.Fatal(err)
	}
	dlogits, err := loss.Backward()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(dlogits); err != nil {
		t.Fatal(err)
	}
	refLoss := func() float64 {
		return refCrossEntropy(refResNet(x64, p, "resnet20", classes, true), n, classes, labels)
	}
	for dir := 0; dir < 3; dir++ {
		v := map[string][]float64{}
		var analytic float64
		for _, q := range m.TrainableParams() {
			v[q.Name] = make([]float64, q.Value.Len())
			for i := range v[q.Name] {
				v[q.Name][i] = r.NormFloat64()
				analytic += v[q.Name][i] * float64(q.Grad.Data()[i])
			}
		}
		shift := func(h float64) {
			for name, d := range v {
				for i := range d {
					p[name][i] += h * d[i]
				}
			}
		}
		const h = 1e-7
		shift(h)
		lp := refLoss()
		shift(-2 * h)
		lm := refLoss()
		shift(h)
		numeric := (lp - lm) / (2 * h)
		if math.Abs(analytic-numeric) > 2e-3*math.Max(math.Abs(numeric), 1e-2) {
			t.Fatalf("direction %d: ⟨grad, v⟩ = %g, central difference %g", dir, analytic, numeric)
		}
	}
}

func TestSameSeedSameParameters(t *testing.T) {
	a, err := NewResNet20(ResNetConfig{Seed: 42, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewResNet20(ResNetConfig{Seed: 42, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := NewResNet20(ResNetConfig{Seed: 43, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	same, differ := true, false
	for i, v := range a.Values() {
		same = same && math.Float32bits(v) == math.Float32bits(b.Values()[i])
		differ = differ || v != c.Values()[i]
	}
	if !same || !differ {
		t.Fatalf("seed 42 twice identical: %t; seed 43 differs: %t", same, differ)
	}
	// The documented scheme: conv weights have std sqrt(2/fan_out).
	w := a.Params()[0]
	var sq float64
	for _, v := range w.Value.Data() {
		sq += float64(v) * float64(v)
	}
	std := math.Sqrt(sq / float64(w.Value.Len()))
	if want := math.Sqrt(2.0 / (16 * 9)); math.Abs(std-want) > 0.15*want {
		t.Fatalf("conv1.weight std %g, want about %g", std, want)
	}
}

func TestBatchNormMovingStatistics(t *testing.T) {
	bn, err := NewBatchNorm2d("bn", BatchNorm2dConfig{Channels: 2, Eps: 1e-5, Momentum: 0.9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Channel 0 holds 1, 2, 3, 4 (mean 2.5, biased variance 1.25), channel 1
	// holds 5 everywhere (variance 0).
	x, _ := tensor.FromSlice([]float32{1, 2, 5, 5, 3, 4, 5, 5}, 2, 2, 1, 2)
	ps := bn.Params()
	mean, variance := ps[0].Value.Data(), ps[1].Value.Data()
	steps := []struct{ mean0, var0, mean1, var1 float32 }{
		{0.25, 0.9 + 0.125, 0.5, 0.9},
		{0.475, 0.9*1.025 + 0.125, 0.95, 0.81},
	}
	for i, s := range steps {
		if _, err := bn.Forward(x, true); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ got, want float32 }{{mean[0], s.mean0}, {variance[0], s.var0}, {mean[1], s.mean1}, {variance[1], s.var1}} {
			if math.Abs(float64(c.got-c.want)) > 1e-6 {
				t.Fatalf("step %d: moving statistics %v %v, want %+v", i+1, mean, variance, s)
			}
		}
	}
	// Training output uses the batch statistics: channel 0 normalised to
	// (x−2.5)/sqrt(1.25+eps).
	y, _ := bn.Forward(x, true)
	if got, want := y.Data()[0], float32((1-2.5)/math.Sqrt(1.25+1e-5)); math.Abs(float64(got-want)) > 1e-6 {
		t.Fatalf("train output %g, want %g", got, want)
	}
	// Inference uses the moving statistics and leaves them alone.
	m0, v0 := mean[0], variance[0]
	y, _ = bn.Forward(x, false)
	if got, want := y.Data()[0], float32((1-float64(m0))/math.Sqrt(float64(v0)+1e-5)); math.Abs(float64(got-want)) > 1e-6 {
		t.Fatalf("inference output %g, want %g", got, want)
	}
	if mean[0] != m0 || variance[0] != v0 {
		t.Fatal("inference changed the moving statistics")
	}
}

func TestSoftmaxCrossEntropyHandComputed(t *testing.T) {
	logits, _ := tensor.FromSlice([]float32{1, 2, 3, 1, 1, 1}, 2, 3)
	l := NewSoftmaxCrossEntropyExpand()
	got, err := l.Forward(logits, []int32{2, 0})
	if err != nil {
		t.Fatal(err)
	}
	// Row 0: −log(e³/(e+e²+e³)) = log(1+e⁻¹+e⁻²) = 0.40760596; row 1: log 3.
	if want := (0.40760596 + 1.0986123) / 2; math.Abs(float64(got)-want) > 1e-6 {
		t.Fatalf("loss %.8f, want %.8f", got, want)
	}
	dx, err := l.Backward()
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0.045015287, 0.12236424, -0.16737953, -1.0 / 3, 1.0 / 6, 1.0 / 6}
	for i, w := range want {
		if math.Abs(float64(dx.Data()[i]-w)) > 1e-6 {
			t.Fatalf("dL/dlogits %v, want %v", dx.Data(), want)
		}
	}
	// A hopeless prediction stays finite thanks to the 1e-24 in the log.
	far, _ := tensor.FromSlice([]float32{0, 200}, 1, 2)
	if got, _ := l.Forward(far, []int32{0}); math.IsInf(float64(got), 0) || got < 50 {
		t.Fatalf("loss for probability e⁻²⁰⁰ = %g, want large and finite", got)
	}
}

func TestInputErrors(t *testing.T) {
	m, err := NewResNet20(ResNetConfig{Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l := NewSoftmaxCrossEntropyExpand()
	if _, err := l.Backward(); !errors.Is(err, ErrNoForward) {
		t.Fatalf("loss backward before forward: %v", err)
	}
	gray, _ := tensor.New(2, 1, 8, 8)
	if _, err := m.Forward(gray, true); !errors.Is(err, tensor.ErrShape) {
		t.Fatalf("1-channel input: err = %v, want ErrShape", err)
	}
	flat, _ := tensor.New(2, 192)
	if _, err := m.Forward(flat, true); !errors.Is(err, tensor.ErrShape) {
		t.Fatalf("rank-2 input: err = %v, want ErrShape", err)
	}
	logits, _ := tensor.New(2, 10)
	if _, err := l.Forward(logits, []int32{0, 10}); !errors.Is(err, ErrLabel) {
		t.Fatalf("label 10 of 10 classes: err = %v, want ErrLabel", err)
	}
	if _, err := l.Forward(logits, []int32{0}); !errors.Is(err, tensor.ErrShape) {
		t.Fatalf("1 label for 2 rows: err = %v, want ErrShape", err)
	}
	x, _ := tensor.New(2, 3, 8, 8)
	if _, err := m.Forward(x, true); err != nil {
		t.Fatal(err)
	}
	wrong, _ := tensor.New(3, 10)
	if err := m.Backward(wrong); !errors.Is(err, tensor.ErrShape) {
		t.Fatalf("backward with a [3 10] gradient: err = %v, want ErrShape", err)
	}
	if _, err := NewResNet20(ResNetConfig{NumClasses: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative classes: err = %v", err)
	}
	if _, err := NewBottleneck("b", BlockConfig{In: 4, Out: 6, Stride: 1, BNEps: 1e-5}, 1, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("bottleneck with 6 outputs: err = %v", err)
	}
	if _, err := NewConv2d("c", Conv2dConfig{In: 1, Out: 1, Kernel: 3, Stride: 1, Pad: tensor.Padding{Mode: tensor.PadExplicit, Top: -1}}, 1, nil); err == nil {
		t.Fatal("negative padding accepted")
	}
	if _, err := NewMaxPool2d("p", 3, 2, tensor.Padding{Mode: tensor.PadExplicit, Top: 3}, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("max pool padding 3 with kernel 3: err = %v", err)
	}
	d, _ := NewDense("fc", 4, 2, true, 1, nil)
	if _, err := d.Backward(wrong); !errors.Is(err, ErrNoForward) {
		t.Fatalf("dense backward before forward: %v", err)
	}
}

// TestForwardBackwardAllocatesNothing checks the steady state: once buffers
// exist for a batch size, a forward, loss and backward allocate nothing.
func TestForwardBackwardAllocatesNothing(t *testing.T) {
	m, err := NewResNet20(ResNetConfig{Seed: 1, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := rand.New(rand.NewPCG(51, 52))
	x := randTensor(t, r, 4, 3, 16, 16)
	labels := []int32{0, 1, 2, 3}
	loss := NewSoftmaxCrossEntropyExpand()
	step := func() {
		logits, err := m.Forward(x, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := loss.Forward(logits, labels); err != nil {
			t.Fatal(err)
		}
		d, err := loss.Backward()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(d); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if allocs := testing.AllocsPerRun(3, step); allocs != 0 {
		t.Fatalf("a steady-state step allocates %v times", allocs)
	}
	// A new batch size allocates once, then is steady again.
	x2 := randTensor(t, r, 2, 3, 16, 16)
	x, labels = x2, labels[:2]
	step()
	if allocs := testing.AllocsPerRun(2, step); allocs != 0 {
		t.Fatalf("after a batch size change a step allocates %v times", allocs)
	}
}
