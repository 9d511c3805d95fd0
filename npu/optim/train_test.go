package optim_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/tensor"
)

// toyBatch makes a learnable problem: class k brightens quadrant k of channel
// k%3 on top of Gaussian noise.
func toyBatch(t testing.TB, r *rand.Rand, n, classes, size int) (*tensor.Tensor, []int32) {
	x, err := tensor.New(n, 3, size, size)
	if err != nil {
		t.Fatal(err)
	}
	labels := make([]int32, n)
	d, half, plane := x.Data(), size/2, size*size
	for i := 0; i < n; i++ {
		k := r.IntN(classes)
		labels[i] = int32(k)
		for j := i * 3 * plane; j < (i+1)*3*plane; j++ {
			d[j] = float32(0.5 * r.NormFloat64())
		}
		h0, w0 := (k/2)*half, (k%2)*half
		for h := h0; h < h0+half; h++ {
			for w := w0; w < w0+half; w++ {
				d[(i*3+k%3)*plane+h*size+w] += 1.5
			}
		}
	}
	return x, labels
}

type trainer struct {
	model *nn.Model
	loss  *nn.SoftmaxCrossEntropyExpand
	opt   *optim.Momentum
}

func newTrainer(t testing.TB, seed uint64, threads, classes int, lrs []float32) *trainer {
	m, err := nn.NewResNet20(nn.ResNetConfig{Seed: seed, NumClasses: classes, Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewMomentum(m.TrainableParams(), optim.MomentumConfig{LearningRates: lrs, Momentum: 0.9, WeightDecay: 1e-4})
	if err != nil {
		t.Fatal(err)
	}
	return &trainer{model: m, loss: nn.NewSoftmaxCrossEntropyExpand(), opt: opt}
}

func (tr *trainer) step(t testing.TB, x *tensor.Tensor, labels []int32) float32 {
	logits, err := tr.model.Forward(x, true)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tr.loss.Forward(logits, labels)
	if err != nil {
		t.Fatal(err)
	}
	d, err := tr.loss.Backward()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.model.Backward(d); err != nil {
		t.Fatal(err)
	}
	tr.opt.Step()
	return l
}

func TestTinyTrainingLossFalls(t *testing.T) {
	const classes, batches, batch, size, steps = 4, 4, 16, 8, 60
	r := rand.New(rand.NewPCG(61, 62))
	var xs []*tensor.Tensor
	var ys [][]int32
	for b := 0; b < batches; b++ {
		x, y := toyBatch(t, r, batch, classes, size)
		xs, ys = append(xs, x), append(ys, y)
	}
	lrs, err := optim.LearningRates(optim.Schedule{Mode: "cosine", LRInit: 0.01, LRMax: 0.05, WarmupEpochs: 1, TotalEpochs: steps / batches, StepsPerEpoch: batches})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(t, 5, 2, classes, lrs)
	defer tr.model.Close()
	var first, last float64
	for s := 0; s < steps; s++ {
		l := float64(tr.step(t, xs[s%batches], ys[s%batches]))
		if math.IsNaN(l) {
			t.Fatalf("step %d: loss is NaN", s)
		}
		if s < batches {
			first += l / batches
		}
		if s >= steps-batches {
			last += l / batches
		}
	}
	t.Logf("mean loss first epoch %.4f, last epoch %.4f", first, last)
	if first < 1 || last > 0.1*first {
		t.Fatalf("mean loss of the first epoch %.4f, of the last %.4f: want a fall to below 10%%", first, last)
	}
	// Inference with the moving statistics classifies fresh samples.
	x, y := toyBatch(t, r, 32, classes, size)
	logits, err := tr.model.Forward(x, false)
	if err != nil {
		t.Fatal(err)
	}
	correct := 0
	for i, label := range y {
		row := logits.Data()[i*classes : (i+1)*classes]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if int32(best) == label {
			correct++
		}
	}
	if correct < 24 {
		t.Fatalf("inference accuracy %d/32 on fresh samples, want at least 24", correct)
	}
}

// TestSameSeedBitIdentical trains twice with the same seed, once on one
// thread and once on two: parameters and moments must match bit for bit.
func TestSameSeedBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	x, y := toyBatch(t, r, 8, 10, 16)
	run := func(threads int) ([]float32, []float32, float32) {
		tr := newTrainer(t, 99, threads, 10, []float32{0.05})
		defer tr.model.Close()
		var l float32
		for s := 0; s < 3; s++ {
			l = tr.step(t, x, y)
		}
		return append([]float32(nil), tr.model.Values()...), append([]float32(nil), tr.opt.Moments()...), l
	}
	v1, m1, l1 := run(1)
	v2, m2, l2 := run(2)
	if math.Float32bits(l1) != math.Float32bits(l2) {
		t.Fatalf("losses differ: %v vs %v", l1, l2)
	}
	for i := range v1 {
		if math.Float32bits(v1[i]) != math.Float32bits(v2[i]) {
			t.Fatalf("parameter value %d differs: %v vs %v", i, v1[i], v2[i])
		}
	}
	for i := range m1 {
		if math.Float32bits(m1[i]) != math.Float32bits(m2[i]) {
			t.Fatalf("moment %d differs: %v vs %v", i, m1[i], m2[i])
		}
	}
}

func TestTrainStepAllocatesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(81, 82))
	x, y := toyBatch(t, r, 8, 10, 16)
	tr := newTrainer(t, 1, 2, 10, []float32{0.01})
	defer tr.model.Close()
	tr.step(t, x, y)
	if allocs := testing.AllocsPerRun(3, func() { tr.step(t, x, y) }); allocs != 0 {
		t.Fatalf("a steady-state training step allocates %v times", allocs)
	}
}

// BenchmarkResNet20TrainStep measures one forward + backward + Momentum update
// of ResNet-20 on a CIFAR-sized batch of 32; the model uses GOMAXPROCS
// threads, so -cpu 1,2 compares one and two cores.
func BenchmarkResNet20TrainStep(b *testing.B) {
	r := rand.New(rand.NewPCG(91, 92))
	x, y := toyBatch(b, r, 32, 10, 32)
	tr := newTrainer(b, 1, 0, 10, []float32{0.01})
	defer tr.model.Close()
	tr.step(b, x, y) // allocate buffers and touch memory outside the timing
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tr.step(b, x, y)
	}
	b.ReportMetric(32*float64(b.N)/b.Elapsed().Seconds(), "images/s")
}
