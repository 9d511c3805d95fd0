package shard

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// batches returns steps global batches of n random CIFAR-shaped images
// with labels, the same for a given seed.
func batches(steps, n int, seed uint64) ([][]float32, [][]int32) {
	s := seed*0x9e3779b97f4a7c15 + 1
	next := func() uint64 {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		return s
	}
	xs, ys := make([][]float32, steps), make([][]int32, steps)
	for i := range xs {
		xs[i] = make([]float32, n*imageChannels*imageSide*imageSide)
		for j := range xs[i] {
			xs[i][j] = float32(next()%2000)/1000 - 1
		}
		ys[i] = make([]int32, n)
		for j := range ys[i] {
			ys[i][j] = int32(next() % DefaultClasses)
		}
	}
	return xs, ys
}

const testLR = 0.05

// run is one training job of several in-process ranks.
type run struct {
	nets     []*Net
	losses   [][]float32 // per rank, per step
	gathered map[string][]float32
}

// trainRanks trains cfg on cfg.Devices in-process ranks for len(xs) steps
// of Momentum (lr 0.05, momentum 0.9) over the global batches xs, ys, and
// gathers the parameters on rank 0.
func trainRanks(t *testing.T, cfg Config, comms []Comm, xs [][]float32, ys [][]int32) *run {
	t.Helper()
	return trainRanksAt(t, testLR, cfg, comms, xs, ys)
}

// trainRanksAt is trainRanks at learning rate lr.
func trainRanksAt(t *testing.T, lr float32, cfg Config, comms []Comm, xs [][]float32, ys [][]int32) *run {
	t.Helper()
	d := cfg.Devices
	res := &run{nets: make([]*Net, d), losses: make([][]float32, d)}
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r := range d {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c := cfg
			c.Rank = r
			if comms != nil {
				c.Comm = comms[r]
			}
			errs[r] = func() error {
				net, err := New(c)
				if err != nil {
					return err
				}
				res.nets[r] = net
				var trainable []*nn.Param
				for _, p := range net.Params() {
					if p.Trainable {
						trainable = append(trainable, p)
					}
				}
				opt, err := optim.NewMomentum(trainable, optim.MomentumConfig{LearningRates: []float32{lr}, Momentum: 0.9})
				if err != nil {
					return err
				}
				for step := range xs {
					x, y := rankBatch(c, xs[step], ys[step])
					loss, err := net.TrainStep(context.Background(), x, y)
					if err != nil {
						return fmt.Errorf("step %d: %w", step+1, err)
					}
					res.losses[r] = append(res.losses[r], loss)
					opt.Step()
				}
				g, err := net.Gather(context.Background(), 0)
				if r == 0 {
					res.gathered = g
				}
				return err
			}()
		}(r)
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range res.nets {
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
	return res
}

// rankBatch returns rank c.Rank's part of a global batch: its rows, and
// under a dataset strategy its window of each image.
func rankBatch(c Config, x []float32, y []int32) (*tensor.Tensor, []int32) {
	n := len(y)
	rows, first := n, 0
	window := DataShard{Offset: [3]int{}, Shape: [3]int{imageChannels, imageSide, imageSide}}
	switch {
	case c.DatasetStrategy != nil:
		var err error
		if window, err = DatasetShard(c.DatasetStrategy, c.Devices, c.Rank); err != nil {
			panic(err)
		}
		rows = n / window.Shards
		first = window.ShardID * rows
	case !c.FullBatch:
		rows = n / c.Devices
		first = c.Rank * rows
	}
	whole := []int{n, imageChannels, imageSide, imageSide}
	shape := []int{rows, window.Shape[0], window.Shape[1], window.Shape[2]}
	t, err := tensor.New(shape...)
	if err != nil {
		panic(err)
	}
	parallel.CopyBox(t.Data(), shape, nil, x, whole, []int{first, window.Offset[0], window.Offset[1], window.Offset[2]}, shape)
	return t, slices.Clone(y[first : first+rows])
}

// relDiff is ‖got − want‖ / ‖want‖.
func relDiff(got, want []float32) float64 {
	var diff, norm float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		diff += d * d
		norm += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(diff) / math.Max(math.Sqrt(norm), 1e-30)
}

// checkReplicas checks that every rank's slice of every parameter is
// bit-identical to the gathered value's box.
func checkReplicas(t *testing.T, res *run) {
	t.Helper()
	for r, net := range res.nets {
		for _, p := range net.Params() {
			l := net.Layouts()[p.Name]
			b, err := l.Box(r)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, volume(b.Shape))
			parallel.CopyBox(want, b.Shape, nil, res.gathered[p.Name], l.Shape, b.Offset, b.Shape)
			for i, v := range p.Value.Data() {
				if math.Float32bits(v) != math.Float32bits(want[i]) {
					t.Fatalf("rank %d %s[%d] = %v, the gathered value (from its lowest holder) is %v", r, p.Name, i, v, want[i])
				}
			}
		}
	}
}

// compare checks the gathered parameters of got against want (relative
// vector norm <= tol) and returns the largest relative difference.
func compare(t *testing.T, got, want map[string][]float32, tol float64) float64 {
	t.Helper()
	worst := 0.0
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || len(g) != len(w) {
			t.Fatalf("%s: %d values, want %d", name, len(g), len(w))
		}
		rel := relDiff(g, w)
		if rel > tol {
			t.Errorf("%s: relative difference %.3g > %g", name, rel, tol)
		}
		worst = max(worst, rel)
	}
	return worst
}

func TestSemiAutoEqualsStandAlone(t *testing.T) {
	const global, steps = 16, 10
	xs, ys := batches(steps, global, 3)
	base := Config{Model: "semi_auto_net", Mode: parallel.StandAlone, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: 7, Threads: 1}
	alone := trainRanks(t, base, nil, xs, ys)
	for _, d := range []int{2, 4, 8} {
		for _, st := range []parallel.Strategy{
			{"fc.matmul": {{1, 1}, {1, 2}}},
			{"fc.matmul": {{2, 2}, {2, 1}}},
			{"end_point.matmul": {{1, 2}, {1, 2}}},
			{"end_point.matmul": {{1, 1}, {2, 1}}},
		} {
			if st["fc.matmul"] != nil && st["fc.matmul"][0][0]*st["fc.matmul"][0][1] > d {
				continue
			}
			t.Run(fmt.Sprintf("%d ranks %v", d, st), func(t *testing.T) {
				cfg := base
				cfg.Mode, cfg.Devices, cfg.BatchPerDevice, cfg.Strategy = parallel.SemiAutoParallel, d, global/d, st
				res := trainRanks(t, cfg, realComms(t, d, collective.TransportTCP), xs, ys)
				worst := compare(t, res.gathered, alone.gathered, 1e-5)
				checkReplicas(t, res)
				t.Logf("largest relative difference %.3g; loss %v vs %v", worst, res.losses[0][steps-1], alone.losses[0][steps-1])
			})
		}
	}
}
