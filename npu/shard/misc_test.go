package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
)

// The graphs name and shape their parameters as the stand_alone models do,
// in the same order.
func TestGraphParamsAreTheModels(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(nn.ResNetConfig) (*nn.Model, error)
	}{{"cnn", nn.NewCNN}, {"resnet20", nn.NewResNet20}, {"resnet50", nn.NewResNet50}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "resnet50" && testing.Short() {
				t.Skip("builds ResNet-50")
			}
			g, err := GraphOf(tc.name, 8)
			if err != nil {
				t.Fatal(err)
			}
			m, err := tc.build(nn.ResNetConfig{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var got []string
			for _, o := range g.Ops {
				for _, p := range o.Params() {
					got = append(got, fmt.Sprint(p.Name, p.Shape))
				}
			}
			var want []string
			for _, p := range m.Params() {
				want = append(want, fmt.Sprint(p.Name, p.Shape()))
			}
			if !slices.Equal(got, want) {
				t.Errorf("graph parameters\n%v\nthe model's\n%v", got, want)
			}
		})
	}
	for _, model := range Models() {
		g, err := GraphOf(model, 16)
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		if last := g.Ops[len(g.Ops)-1]; last.Kind != parallel.OpLoss {
			t.Errorf("%s ends with %s", model, last.Name)
		}
	}
	if _, err := GraphOf("resnet21", 8); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "semi_auto_net") {
		t.Errorf("unknown model: %v", err)
	}
}

func TestBadStrategiesNameTheOperator(t *testing.T) {
	for _, tc := range []struct {
		model    string
		mode     parallel.Mode
		strategy parallel.Strategy
		want     []string
	}{
		{"semi_auto_net", parallel.SemiAutoParallel, parallel.Strategy{"fc.matmull": {{1, 1}, {1, 2}}}, []string{`no operator "fc.matmull"`, "fc.matmul, relu"}},
		{"semi_auto_net", parallel.SemiAutoParallel, parallel.Strategy{"fc.matmul": {{1, 1}, {1, 3}}}, []string{"operator fc.matmul (MatMul)", "uses 3 devices"}},
		{"semi_auto_net", parallel.SemiAutoParallel, parallel.Strategy{"end_point.matmul": {{1, 1}, {4, 1}}}, []string{"operator end_point.matmul", "not divisible into 4 slices"}},
		{"semi_auto_net", parallel.SemiAutoParallel, parallel.Strategy{"loss": {{1, 2}}}, []string{"operator loss", "cannot be split"}},
		{"cnn", parallel.SemiAutoParallel, parallel.Strategy{"conv1": {{1, 3, 1, 1}, {1, 3, 1, 1}}}, []string{"operator conv1 (Conv2D)", "cannot be split"}},
		{"cnn", parallel.SemiAutoParallel, parallel.Strategy{"mean": {{1, 1, 2, 1}}}, []string{"operator mean (AvgPool)", "cannot be split"}},
		{"hybrid_net", parallel.HybridParallel, parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, []string{"hybrid_parallel", "declares its own split"}},
		{"hybrid_net", parallel.SemiAutoParallel, nil, []string{"runs in mode hybrid_parallel, not semi_auto_parallel"}},
		{"semi_auto_net", parallel.DataParallel, parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, []string{"mode data_parallel takes none: it does not split operators"}},
	} {
		_, err := New(Config{Model: tc.model, Mode: tc.mode, Strategy: tc.strategy, Devices: 4, Comm: memComms(4)[0], BatchPerDevice: 2, Threads: 1})
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s %v: %v, want %q", tc.model, tc.strategy, err, w)
			}
		}
	}
}

// wide_net does not fit a 128 MiB device whole, and trains split 8 ways.
func TestWideNetNeedsSplitting(t *testing.T) {
	const capacity = 128 << 20
	_, err := New(Config{Model: "wide_net", Devices: 1, BatchPerDevice: 16, Seed: 1, Threads: 1, Memory: capacity})
	if !errors.Is(err, nn.ErrOutOfMemory) {
		t.Fatalf("stand_alone under 128 MiB: %v, want out of memory", err)
	}
	t.Logf("stand_alone: %v", err)
	const d, global = 8, 16
	xs, ys := batches(2, global, 21)
	cfg := Config{Model: "wide_net", Mode: parallel.SemiAutoParallel, Strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 8}}},
		Devices: d, BatchPerDevice: global / d, GradientsMean: true, Seed: 1, Threads: 1, Memory: capacity}
	res := trainRanks(t, cfg, realComms(t, d, collective.TransportTCP), xs, ys)
	for r, net := range res.nets {
		_, peak := net.Device().MemoryInUse()
		if peak > capacity {
			t.Errorf("rank %d peak %s over the capacity", r, bytesize.Format(peak))
		}
		if r == 0 {
			t.Logf("rank 0 peak %s of %s; fc.weight slice %v", bytesize.Format(peak), bytesize.Format(capacity), net.Params()[0].Shape())
		}
	}
	checkReplicas(t, res)
}

// Predict gives every rank the whole logits of its own rows, as one device
// computes them for the global batch, with and without full_batch.
func TestPredict(t *testing.T) {
	const global = 16
	xs, ys := batches(1, global, 31)
	alone, err := New(Config{Model: "semi_auto_net", Devices: 1, BatchPerDevice: global, Seed: 2, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	x, _ := rankBatch(Config{Devices: 1}, xs[0], ys[0])
	want, err := alone.Predict(context.Background(), x)
	if err != nil {
		t.Fatal(err)
	}
	for _, full := range []bool{false, true} {
		const d = 4
		comms := memComms(d)
		var wg sync.WaitGroup
		errs := make([]error, d)
		for r := range d {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				errs[r] = func() error {
					cfg := Config{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: parallel.Strategy{"end_point.matmul": {{2, 2}, {1, 2}}},
						Devices: d, Rank: r, Comm: comms[r], BatchPerDevice: global / d, FullBatch: full, Seed: 2, Threads: 1}
					if full {
						cfg.BatchPerDevice = global
					}
					net, err := New(cfg)
					if err != nil {
						return err
					}
					defer net.Close()
					x, _ := rankBatch(cfg, xs[0], ys[0])
					got, err := net.Predict(context.Background(), x)
					if err != nil {
						return err
					}
					first := 0
					if !full {
						first = r * global / d
					}
					c := DefaultClasses
					if rel := relDiff(got.Data(), want.Data()[first*c:first*c+got.Len()]); rel > 1e-6 || !got.HasShape(x.Dim(0), c) {
						return fmt.Errorf("logits %v differ from one device's rows by %.3g", got.Shape(), rel)
					}
					return nil
				}()
			}(r)
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Errorf("full batch %v rank %d: %v", full, r, err)
			}
		}
	}
}

// stepGrads runs one TrainStep on every rank and returns the ranks' nets.
func stepGrads(t *testing.T, cfg Config, x []float32, y []int32) []*Net {
	t.Helper()
	comms := memComms(cfg.Devices)
	nets := make([]*Net, cfg.Devices)
	errs := make([]error, cfg.Devices)
	var wg sync.WaitGroup
	for r := range nets {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c := cfg
			c.Rank, c.Comm = r, comms[r]
			if nets[r], errs[r] = New(c); errs[r] != nil {
				return
			}
			xr, yr := rankBatch(c, x, y)
			_, errs[r] = nets[r].TrainStep(context.Background(), xr, yr)
		}(r)
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range nets {
			if n != nil {
				n.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return nets
}

// Without gradients_mean, gradients are the sum of the per-device means:
// semi_auto_parallel gives Devices times the mean gradient everywhere;
// hybrid_parallel (MindSpore's rule) leaves the layerwise_parallel
// gradients alone and sums the others over all devices.
func TestGradientsSum(t *testing.T) {
	const global, d = 16, 4
	xs, ys := batches(1, global, 41)
	one := stepGrads(t, Config{Model: "semi_auto_net", Mode: parallel.StandAlone, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: 8, Threads: 1}, xs[0], ys[0])[0]
	whole := map[string][]float32{}
	for _, p := range one.Params() {
		whole[p.Name] = p.Grad.Data()
	}
	for _, tc := range []struct {
		model  string
		mode   parallel.Mode
		scale  func(name string) float32
		strat  parallel.Strategy
		layers string
	}{
		{"semi_auto_net", parallel.SemiAutoParallel, func(string) float32 { return d }, parallel.Strategy{"fc.matmul": {{2, 2}, {2, 1}}}, ""},
		{"hybrid_net", parallel.HybridParallel, func(name string) float32 {
			if name == "end_point.bias" {
				return d
			}
			return 1
		}, nil, ""},
	} {
		nets := stepGrads(t, Config{Model: tc.model, Mode: tc.mode, Strategy: tc.strat, Devices: d, BatchPerDevice: global / d, Seed: 8, Threads: 1}, xs[0], ys[0])
		for r, net := range nets {
			for _, p := range net.Params() {
				want := boxOf(t, whole[p.Name], net.Layouts()[p.Name], r)
				for i := range want {
					want[i] *= tc.scale(p.Name)
				}
				if rel := relDiff(p.Grad.Data(), want); rel > 1e-5 {
					t.Errorf("%s rank %d: gradient of %s differs from %v× the mean gradient by %.3g", tc.model, r, p.Name, tc.scale(p.Name), rel)
				}
			}
		}
	}
}

// full_batch: every rank receives the whole global batch; training equals
// one device's.
func TestFullBatchEqualsStandAlone(t *testing.T) {
	const global, steps, d = 8, 5, 4
	xs, ys := batches(steps, global, 51)
	alone := trainRanks(t, Config{Model: "semi_auto_net", Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: 6, Threads: 1}, nil, xs, ys)
	cfg := Config{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 4}}},
		Devices: d, BatchPerDevice: global, FullBatch: true, GradientsMean: true, Seed: 6, Threads: 1}
	res := trainRanks(t, cfg, memComms(d), xs, ys)
	compare(t, res.gathered, alone.gathered, 1e-5)
	checkReplicas(t, res)
	for r := range d {
		for i, l := range res.losses[r] {
			if math.Float32bits(l) != math.Float32bits(res.losses[0][i]) {
				t.Errorf("rank %d step %d: loss %v, rank 0's %v", r, i+1, l, res.losses[0][i])
			}
		}
	}
}

// ResNet-20 with a split stem and batch-split BatchNorm trains and keeps
// its replicas (moving statistics included) bit-identical.
func TestResNet20SplitStem(t *testing.T) {
	if testing.Short() {
		t.Skip("trains ResNet-20 on 4 ranks")
	}
	const global, d = 8, 4
	xs, ys := batches(2, global, 61)
	cfg := Config{Model: "resnet20", Mode: parallel.SemiAutoParallel,
		Strategy: parallel.Strategy{"conv1": {{2, 1, 1, 1}, {2, 1, 1, 1}}, "bn1": {{2, 2, 1, 1}}},
		Devices:  d, BatchPerDevice: global / d, GradientsMean: true, Seed: 2, Threads: 1}
	res := trainRanks(t, cfg, realComms(t, d, collective.TransportTCP), xs, ys)
	checkReplicas(t, res)
	for _, l := range res.losses[0] {
		if math.IsNaN(float64(l)) || l <= 0 {
			t.Errorf("loss %v", l)
		}
	}
	if v := res.gathered["bn1.moving_mean"]; v == nil || relDiff(v, make([]float32, len(v))) == 0 {
		t.Errorf("bn1.moving_mean never moved: %v", v)
	}
}

// Every layout starts from the stand_alone initial values: gathered on any
// root before training, the slices are the one-device parameters, bit for
// bit.
func TestGatherInitialValuesOnAnyRoot(t *testing.T) {
	const d = 4
	want := initial(t, "semi_auto_net", 12)
	for _, root := range []int{0, 3} {
		comms := memComms(d)
		got := make([]map[string][]float32, d)
		errs := make([]error, d)
		var wg sync.WaitGroup
		for r := range d {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				net, err := New(Config{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Devices: d, Rank: r, Comm: comms[r],
					Strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}, "end_point.matmul": {{1, 2}, {1, 2}}}, BatchPerDevice: 2, Seed: 12, Threads: 1})
				if err != nil {
					errs[r] = err
					return
				}
				defer net.Close()
				got[r], errs[r] = net.Gather(context.Background(), root)
			}(r)
		}
		wg.Wait()
		for r := range d {
			if errs[r] != nil {
				t.Fatalf("rank %d: %v", r, errs[r])
			}
			if r != root && got[r] != nil {
				t.Errorf("rank %d, not the root, got parameters", r)
			}
		}
		for name, w := range want {
			g := got[root][name]
			if len(g) != len(w) {
				t.Fatalf("root %d: %s has %d values, want %d", root, name, len(g), len(w))
			}
			for i := range w {
				if math.Float32bits(g[i]) != math.Float32bits(w[i]) {
					t.Fatalf("root %d: %s[%d] = %v, one device's %v", root, name, i, g[i], w[i])
				}
			}
		}
	}
}

// Once its buffers exist, a step allocates nothing on one device (fresh
// memory is slow to touch on these machines).
func TestStepAllocatesNothing(t *testing.T) {
	net, err := New(Config{Model: "cnn", Devices: 1, BatchPerDevice: 4, GradientsMean: true, Seed: 1, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	xs, ys := batches(1, 4, 71)
	x, y := rankBatch(Config{Devices: 1}, xs[0], ys[0])
	step := func() {
		if _, err := net.TrainStep(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if allocs := testing.AllocsPerRun(3, step); allocs != 0 {
		t.Errorf("a steady-state step allocates %v times", allocs)
	}
}

// A step makes only the collective calls its layouts need: for the seeds'
// fc.matmul [[1, 1], [1, 2]] on 4 ranks, the images gathered for fc.matmul,
// its column slices spread over the batch for relu and back, and one
// reduction of the data-parallel end_point's gradients, which carries the
// loss's sum too; nothing before fc.matmul in backward. One device makes none.
// hybrid_net's labels move in the Exchange that gathers the images (the
// batch is split, the loss's rows are not): that, its explicit AllReduce
// and the reduction of end_point.bias, and no Exchange of the labels.
func TestCommCallsPerStep(t *testing.T) {
	const global, d = 8, 4
	xs, ys := batches(1, global, 81)
	cfg := Config{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}},
		Devices: d, BatchPerDevice: global / d, GradientsMean: true, Seed: 1, Threads: 1}
	for r, net := range stepGrads(t, cfg, xs[0], ys[0]) {
		if calls, _ := net.CommStats(); calls != 4 {
			t.Errorf("rank %d made %d collective calls in a step, want 4", r, calls)
		}
	}
	hybrid := Config{Model: "hybrid_net", Mode: parallel.HybridParallel, Devices: d, BatchPerDevice: global / d, GradientsMean: true, Seed: 1, Threads: 1}
	for r, net := range stepGrads(t, hybrid, xs[0], ys[0]) {
		if calls, _ := net.CommStats(); calls != 3 {
			t.Errorf("hybrid_net, rank %d made %d collective calls in a step, want 3", r, calls)
		}
	}
	one := stepGrads(t, Config{Model: "semi_auto_net", Devices: 1, BatchPerDevice: global, Seed: 1, Threads: 1}, xs[0], ys[0])[0]
	if calls, elapsed := one.CommStats(); calls != 0 || elapsed != 0 {
		t.Errorf("one device: %d calls, %v", calls, elapsed)
	}
}
