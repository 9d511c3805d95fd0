package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/collective/collectivetest"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/parallel"
)

// pipeRun is a pipeline job of in-process ranks: global rank s·P+i is
// local rank i of stage s.
type pipeRun struct {
	nets     []*Net
	losses   [][]float32
	gathered map[string][]float32 // every stage's parameters, whole
	logits   [][]float32          // per rank: Predict of the last step's batch after training
}

// trainPipe trains cfg (one stage group's config: Devices = P ranks per
// stage) as a pipeline of k stages over real collectives: one
// communicator per stage group, one two-rank link per neighbour pair, each
// rank fed the whole global batch. Each stage's parameters are gathered on
// its local rank 0.
func trainPipe(t *testing.T, cfg Config, k int, xs [][]float32, ys [][]int32) *pipeRun {
	t.Helper()
	p := cfg.Devices
	d := k * p
	stageComms := make([][]Comm, k)
	for s := range k {
		if p > 1 {
			stageComms[s] = realComms(t, p, collective.TransportTCP)
		}
	}
	// links[s][i] joins local rank i of stages s and s+1.
	links := make([][]*[2]Link, k)
	for s := range k - 1 {
		for range p {
			g := collectivetest.Group(t, 2, collective.TransportTCP)
			links[s] = append(links[s], &[2]Link{g[0], g[1]})
		}
	}
	res := &pipeRun{nets: make([]*Net, d), losses: make([][]float32, d), gathered: map[string][]float32{}, logits: make([][]float32, d)}
	errs := make([]error, d)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range d {
		s, i := g/p, g%p
		c := cfg
		c.Rank = i
		if stageComms[s] != nil {
			c.Comm = stageComms[s][i]
		}
		c.Pipeline.Stages, c.Pipeline.Stage = k, s
		if s > 0 {
			c.Pipeline.Prev = links[s-1][i][1]
		}
		if s < k-1 {
			c.Pipeline.Next = links[s][i][0]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = func() error {
				net, err := New(c)
				if err != nil {
					return err
				}
				res.nets[g] = net
				opt, err := optim.NewMomentum(trainableOf(net), optim.MomentumConfig{LearningRates: []float32{testLR}, Momentum: 0.9})
				if err != nil {
					return err
				}
				for step := range xs {
					x, y := rankBatch(Config{FullBatch: true}, xs[step], ys[step])
					loss, err := net.TrainStep(context.Background(), x, y)
					if err != nil {
						return fmt.Errorf("step %d: %w", step+1, err)
					}
					res.losses[g] = append(res.losses[g], loss)
					opt.Step()
				}
				x, _ := rankBatch(Config{FullBatch: true}, xs[len(xs)-1], ys[len(ys)-1])
				logits, err := net.Predict(context.Background(), x)
				if err != nil {
					return fmt.Errorf("predict: %w", err)
				}
				res.logits[g] = logits.Data()
				vals, err := net.Gather(context.Background(), 0)
				mu.Lock()
				maps.Copy(res.gathered, vals)
				mu.Unlock()
				return err
			}()
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range res.nets {
			if n != nil {
				n.Close()
			}
		}
	})
	for g, err := range errs {
		if err != nil {
			t.Fatalf("rank %d (stage %d): %v", g, g/p, err)
		}
	}
	return res
}

func trainableOf(net *Net) []*nn.Param {
	var out []*nn.Param
	for _, p := range net.Params() {
		if p.Trainable {
			out = append(out, p)
		}
	}
	return out
}

// trainAccumulated trains cfg on one device with gradient accumulation
// over micro micro-batches, as npu/trainer does (the mean of the
// micro-batches' gradients): BatchNorm's statistics are then per
// micro-batch, as in a pipeline.
func trainAccumulated(t *testing.T, cfg Config, micro int, xs [][]float32, ys [][]int32) *run {
	t.Helper()
	global := len(ys[0])
	cfg.BatchPerDevice = global / micro
	net, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	train := trainableOf(net)
	opt, err := optim.NewMomentum(train, optim.MomentumConfig{LearningRates: []float32{testLR}, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	acc := make([][]float32, len(train))
	for k, p := range train {
		acc[k] = make([]float32, p.Value.Len())
	}
	res := &run{nets: []*Net{net}, losses: [][]float32{nil}}
	image := imageChannels * imageSide * imageSide
	per := global / micro
	for step := range xs {
		var loss float32
		for m := range micro {
			x, y := rankBatch(Config{FullBatch: true}, xs[step][m*per*image:(m+1)*per*image], ys[step][m*per:(m+1)*per])
			l, err := net.TrainStep(context.Background(), x, y)
			if err != nil {
				t.Fatal(err)
			}
			loss += l / float32(micro)
			for k, p := range train {
				for j, v := range p.Grad.Data() {
					if m == 0 {
						acc[k][j] = v
					} else {
						acc[k][j] += v
					}
				}
			}
		}
		for k, p := range train {
			for j, v := range acc[k] {
				p.Grad.Data()[j] = v / float32(micro)
			}
		}
		opt.Step()
		res.losses[0] = append(res.losses[0], loss)
	}
	if res.gathered, err = net.Gather(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	return res
}

// checkPipeLosses checks that every rank reports the same loss, close to
// stand_alone's.
func checkPipeLosses(t *testing.T, got *pipeRun, want []float32) {
	t.Helper()
	for g, ls := range got.losses {
		for step, l := range ls {
			if math.Float32bits(l) != math.Float32bits(got.losses[0][step]) {
				t.Errorf("rank %d step %d: loss %v, rank 0 %v", g, step+1, l, got.losses[0][step])
			}
			if math.Abs(float64(l-want[step])) > 1e-4*math.Abs(float64(want[step])) {
				t.Errorf("rank %d step %d: loss %v, stand_alone %v", g, step+1, l, want[step])
			}
		}
	}
}

// checkPipeLogits checks that every rank's Predict after training gives
// the whole logits, equal to stand_alone's net's on the same batch.
func checkPipeLogits(t *testing.T, res *pipeRun, alone *Net, x []float32) {
	t.Helper()
	xt, _ := rankBatch(Config{FullBatch: true}, x, make([]int32, len(x)/(imageChannels*imageSide*imageSide)))
	want, err := alone.Predict(context.Background(), xt)
	if err != nil {
		t.Fatal(err)
	}
	for g, l := range res.logits {
		if len(l) != want.Len() {
			t.Fatalf("rank %d: %d logits, want %d", g, len(l), want.Len())
		}
		if rel := relDiff(l, want.Data()); rel > 1e-4 {
			t.Errorf("rank %d: logits %.3g from stand_alone's", g, rel)
		}
	}
}

// TestPipelineEqualsStandAlone trains cnn (no BatchNorm) in 2 and 4
// stages of one rank with 1, 2, 4 and 8 micro-batches: every parameter
// equals stand_alone's on the full batch after 10 steps.
func TestPipelineEqualsStandAlone(t *testing.T) {
	const global, steps, seed = 16, 10, 4
	xs, ys := batches(steps, global, 21)
	base := Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: seed, Threads: 1}
	aloneCfg := base
	aloneCfg.Mode = parallel.StandAlone
	alone := trainRanks(t, aloneCfg, nil, xs, ys)
	checkMoved(t, alone.gathered, initial(t, "cnn", seed))
	for _, k := range []int{2, 4} {
		for _, m := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%d stages %d micro-batches", k, m), func(t *testing.T) {
				cfg := base
				cfg.Pipeline.Micro = m
				res := trainPipe(t, cfg, k, xs, ys)
				t.Logf("largest relative difference %.3g", compare(t, res.gathered, alone.gathered, 2e-5))
				checkPipeLosses(t, res, alone.losses[0])
				checkPipeLogits(t, res, alone.nets[0], xs[steps-1])
			})
		}
	}
}

// TestPipelineSchedulesSameBits: 1F1B and GPipe accumulate the
// micro-batches' gradients in the same order (backwards run in
// micro-batch order in both), so they give the same bits.
func TestPipelineSchedulesSameBits(t *testing.T) {
	const global, steps = 16, 4
	xs, ys := batches(steps, global, 22)
	base := Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: 2, Threads: 1}
	base.Pipeline.Micro = 4
	one := trainPipe(t, base, 4, xs, ys)
	base.Pipeline.Schedule = GPipe
	gp := trainPipe(t, base, 4, xs, ys)
	for name, v := range one.gathered {
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(gp.gathered[name][i]) {
				t.Fatalf("%s[%d]: 1f1b %v, gpipe %v", name, i, v[i], gp.gathered[name][i])
			}
		}
	}
}

// TestPipelineBatchNormEqualsAccumulation trains resnet20 (BatchNorm in
// every block) in 2 stages with 2 micro-batches, GPipe and 1F1B: equal to
// stand_alone with gradient accumulation 2, whose BatchNorm also sees one
// micro-batch at a time (moving statistics included: recomputing a
// forward for its backward must not update them twice).
func TestPipelineBatchNormEqualsAccumulation(t *testing.T) {
	const global, steps, micro = 8, 10, 2
	xs, ys := batches(steps, global, 23)
	base := Config{Model: "resnet20", Mode: parallel.StandAlone, Devices: 1, GradientsMean: true, Seed: 6, Threads: 1}
	alone := trainAccumulated(t, base, micro, xs, ys)
	for _, sched := range []Schedule{OneFOneB, GPipe} {
		t.Run(sched.String(), func(t *testing.T) {
			cfg := base
			cfg.Mode, cfg.BatchPerDevice = parallel.SemiAutoParallel, global
			cfg.Pipeline.Micro, cfg.Pipeline.Schedule = micro, sched
			res := trainPipe(t, cfg, 2, xs, ys)
			t.Logf("largest relative difference %.3g", compare(t, res.gathered, alone.gathered, 2e-5))
			if _, ok := res.gathered["layer3.2.bn2d.moving_mean"]; !ok {
				t.Error("no moving statistics compared")
			}
		})
	}
}

// TestPipelineTimesOperatorTimesData: 8 ranks, 2 stages of 2×2 (batch
// split in two, conv2 split over output channels and the matmul's
// contraction), with 4 micro-batches: equal to stand_alone.
func TestPipelineTimesOperatorTimesData(t *testing.T) {
	const global, steps, seed = 16, 10, 8
	xs, ys := batches(steps, global, 24)
	alone := trainRanks(t, Config{Model: "cnn", Mode: parallel.StandAlone, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: seed, Threads: 1}, nil, xs, ys)
	cfg := Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Devices: 4, BatchPerDevice: global / 4, GradientsMean: true, Seed: seed, Threads: 1,
		Strategy: parallel.Strategy{
			"conv1":            {{2, 1, 1, 1}, {2, 1, 1, 1}},
			"conv2":            {{2, 1, 1, 1}, {2, 1, 1, 1}},
			"end_point.matmul": {{2, 2}, {1, 2}},
		}}
	cfg.Pipeline.Micro = 4
	res := trainPipe(t, cfg, 2, xs, ys)
	t.Logf("largest relative difference %.3g", compare(t, res.gathered, alone.gathered, 2e-5))
	checkPipeLosses(t, res, alone.losses[0])
	checkPipeLogits(t, res, alone.nets[0], xs[steps-1])
	// The split layouts were used: conv2.weight is sliced on stage 0.
	if l := res.nets[0].Layouts()["conv1.weight"]; !strings.Contains(fmt.Sprint(l.TensorMap), "1") {
		t.Errorf("conv1.weight layout %+v, want it split", l)
	}
}

// Pipeline configs and stage assignments that cannot run are refused
// with the reason.
func TestPipelineRefusals(t *testing.T) {
	base := Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Devices: 1, BatchPerDevice: 8, Threads: 1}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Pipeline = Pipeline{Stages: 5, Stage: 0, Next: nopLink{}} }, "at most 4 pipeline stages"},
		{func(c *Config) { c.Pipeline = Pipeline{Stages: 2, Stage: 0, Micro: 3, Next: nopLink{}} }, "does not split into 3 micro-batches"},
		{func(c *Config) { c.Pipeline = Pipeline{Stages: 2, Stage: 0} }, "needs a link"},
		{func(c *Config) {
			c.Pipeline = Pipeline{Stages: 2, Stage: 0, Next: nopLink{}, Assign: map[string]int{"conv9": 1}}
		}, `"conv9", not an operator of cnn`},
		{func(c *Config) {
			c.Pipeline = Pipeline{Stages: 3, Stage: 0, Next: nopLink{}, Assign: map[string]int{"conv2": 2}}
		}, "leaving stage 1 empty"},
		{func(c *Config) {
			c.Pipeline = Pipeline{Stages: 2, Stage: 0, Next: nopLink{}, Assign: map[string]int{"conv1": 1}}
		}, "cannot start before or at the first operator with parameters"},
		{func(c *Config) {
			c.Pipeline = Pipeline{Stages: 2, Stage: 0, Next: nopLink{}, Assign: map[string]int{"pool2": 1, "end_point.matmul": 0}}
		}, "stages must follow the operators' order"},
		{func(c *Config) {
			c.Mode, c.Pipeline = parallel.StandAlone, Pipeline{Stages: 2, Stage: 0, Next: nopLink{}}
		}, "pipeline stages in mode stand_alone"},
	} {
		cfg := base
		tc.mod(&cfg)
		net, err := New(cfg)
		if err == nil {
			net.Close()
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", cfg.Pipeline, err, tc.want)
		}
	}
}

// The default cut balances parameter counts; pipeline_stage moves it.
func TestPipelineStages(t *testing.T) {
	spans, err := PipelineStages("cnn", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if spans[1].First != "conv2" || spans[0].Last != "pool1" || spans[0].Params+spans[1].Params != 448+4640+330 {
		t.Errorf("cnn in 2 stages: %+v", spans)
	}
	spans, err = PipelineStages("cnn", 2, map[string]int{"end_point.matmul": 1})
	if err != nil {
		t.Fatal(err)
	}
	if spans[1].First != "end_point.matmul" || spans[1].Params != 330 {
		t.Errorf("cnn with end_point on stage 1: %+v", spans)
	}
	spans, err = PipelineStages("resnet20", 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	var most, total int64
	for _, s := range spans {
		most, total = max(most, s.Params), total+s.Params
	}
	// resnet20's last blocks hold most parameters; the largest stage is
	// still well under the whole.
	if most > total/2 {
		t.Errorf("resnet20 in 4 stages: largest stage %d of %d parameters: %+v", most, total, spans)
	}
}

type nopLink struct{}

func (nopLink) SendRecv(context.Context, []float32, []float32) error { return nil }
