// Command parallel measures one training step of a network split across
// simulated devices (npu/shard) beside the same network in data parallel
// on the same global batch, with the time spent in collectives shown
// apart, and prints what auto_parallel's cost model predicts for each
// beside what was measured.
//
// The ranks run in one process, one goroutine and one compute thread
// each, joined by real collectives (shared memory or loopback TCP), as
// the rank processes of npu/train are: the figures include every copy and
// every frame, but not process scheduling.
//
//	go run ./bench/parallel                          # wide_net on 8 devices
//	go run ./bench/parallel -model semi_auto_net -strategy '{"fc.matmul":[[1,1],[1,2]]}'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/parallel/auto"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/tensor"
)

func main() {
	model := flag.String("model", "wide_net", "model (one of "+fmt.Sprint(shard.Models())+")")
	devices := flag.Int("devices", 8, "simulated devices (ranks)")
	batch := flag.Int("batch", 4, "batch per device; the global batch is batch × devices")
	steps := flag.Int("steps", 6, "timed steps (after 2 warm-up steps)")
	strategyJSON := flag.String("strategy", `{"fc.matmul":[[1,1],[1,8]]}`, "semi_auto_parallel strategy as JSON (\"\" to skip)")
	transport := flag.String("transport", "shm", "collective transport: shm or tcp")
	flag.Parse()
	if err := run(*model, *devices, *batch, *steps, *strategyJSON, *transport); err != nil {
		fmt.Fprintln(os.Stderr, "bench/parallel:", err)
		os.Exit(1)
	}
}

// result is one mode's measured and predicted step.
type result struct {
	mode                       string
	strategy                   parallel.Strategy
	step, comm, wait           time.Duration // medians over the timed steps, rank 0
	peak                       int64         // largest peak device memory of any rank
	predStep, predComm         float64       // seconds
	predMemory                 int64
	predicted, predictedFits   bool
	predictionErr, measuredErr error
	memoryCap                  int64
}

func run(model string, devices, batch, steps int, strategyJSON, transportName string) error {
	tr, err := collective.ParseTransport(transportName)
	if err != nil {
		return err
	}
	g, err := shard.GraphOf(model, batch*devices)
	if err != nil {
		return err
	}
	machine := job.Machine(devices, 0) // what npu/train plans with

	plan, err := auto.Search(g, devices, machine)
	if err != nil {
		return err
	}
	modes := []struct {
		name     string
		mode     parallel.Mode
		strategy parallel.Strategy
	}{{"data_parallel", parallel.DataParallel, nil}}
	if strategyJSON != "" {
		var s parallel.Strategy
		if err := json.Unmarshal([]byte(strategyJSON), &s); err != nil {
			return fmt.Errorf("-strategy: %w", err)
		}
		modes = append(modes, struct {
			name     string
			mode     parallel.Mode
			strategy parallel.Strategy
		}{"semi_auto_parallel", parallel.SemiAutoParallel, s})
	}
	modes = append(modes, struct {
		name     string
		mode     parallel.Mode
		strategy parallel.Strategy
	}{"auto_parallel", parallel.AutoParallel, plan.Strategy})

	fmt.Printf("%s, %d devices, global batch %d, transport %s, %d CPUs (GOMAXPROCS %d), %d timed steps\n",
		model, devices, batch*devices, tr, runtime.NumCPU(), runtime.GOMAXPROCS(0), steps)
	if tr == collective.TransportTCP {
		fmt.Print("every collective over loopback TCP\n\n")
	} else {
		fmt.Print("shared memory between the ranks for every collective: gradient buckets in Alloc memory, " +
			"Exchange and group reductions through staging memory\n\n")
	}
	fmt.Println("| mode | strategy | step (measured) | of it in collectives | of that, waiting for the last rank to enter | step (predicted) | comm (predicted) | peak memory per rank (measured) | (predicted) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, m := range modes {
		r := result{mode: m.name, strategy: m.strategy}
		if p, err := auto.Evaluate(g, m.strategy, devices, machine); err == nil {
			r.predStep, r.predComm, r.predMemory = p.StepSeconds, p.CommSeconds, p.PeakMemory
		} else {
			r.predictionErr = err
		}
		r.step, r.comm, r.wait, r.peak, r.measuredErr = measure(model, m.mode, m.strategy, devices, batch, steps, tr)
		strategy := "-"
		if len(m.strategy) > 0 {
			b, _ := json.Marshal(m.strategy)
			strategy = "`" + string(b) + "`"
		}
		measured := fmt.Sprintf("%.1f ms | %.1f ms (%.0f%%) | %.1f ms | ", ms(r.step), ms(r.comm), 100*ms(r.comm)/ms(r.step), ms(r.wait))
		if r.measuredErr != nil {
			measured = fmt.Sprintf("failed: %v | - | - | ", r.measuredErr)
		}
		predicted := fmt.Sprintf("%.1f ms | %.1f ms", r.predStep*1e3, r.predComm*1e3)
		if r.predictionErr != nil {
			predicted = "- | -"
		}
		fmt.Printf("| %s | %s | %s%s | %s | %s |\n", m.name, strategy, measured, predicted, bytesize.Format(r.peak), bytesize.Format(r.predMemory))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// timedComm counts the time a rank spends inside collectives, and the part
// of it before the last rank of the job entered the same call (every rank
// makes the same calls in the same order): with more ranks than cores,
// that part is mostly the other ranks computing, not data moving.
type timedComm struct {
	*collective.Comm
	spent, waited atomic.Int64
	calls         int
	entries       *entries
}

// entries records when each rank entered each collective call.
type entries struct {
	mu sync.Mutex
	at [][]int64 // by call, by rank: unix nanoseconds (0: not yet)
}

func (e *entries) enter(call, rank, ranks int, at int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.at) <= call {
		e.at = append(e.at, make([]int64, ranks))
	}
	e.at[call][rank] = at
}

// last returns when the last rank entered call.
func (e *entries) last(call int) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Max(e.at[call])
}

func (c *timedComm) timed(f func() error) error {
	began := time.Now()
	call := c.calls
	c.calls++
	c.entries.enter(call, c.Rank(), c.Size(), began.UnixNano())
	err := f()
	end := time.Now()
	c.spent.Add(int64(end.Sub(began)))
	if w := min(c.entries.last(call), end.UnixNano()) - began.UnixNano(); w > 0 {
		c.waited.Add(w)
	}
	return err
}

func (c *timedComm) Exchange(ctx context.Context, send, recv [][]float32) error {
	return c.timed(func() error { return c.Comm.Exchange(ctx, send, recv) })
}

// AllReduce is what the engine reduces whole-job gradient buckets with
// (through shared memory on one host).
func (c *timedComm) AllReduce(ctx context.Context, buf []float32, op collective.Op) error {
	return c.timed(func() error { return c.Comm.AllReduce(ctx, buf, op) })
}

func (c *timedComm) GroupAllReduce(ctx context.Context, buf []float32, op collective.Op, group []int) error {
	return c.timed(func() error { return c.Comm.GroupAllReduce(ctx, buf, op, group) })
}

// measure trains devices in-process ranks for 2+steps steps and returns
// rank 0's median step, median time in collectives and median part of it
// waiting for the last rank to enter, and the largest peak device memory
// of any rank.
func measure(model string, mode parallel.Mode, strategy parallel.Strategy, devices, batch, steps int, tr collective.Transport) (step, comm, wait time.Duration, peak int64, err error) {
	comms, err := connect(devices, tr)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	stepTimes := make([][]time.Duration, devices)
	commTimes := make([][]time.Duration, devices)
	waitTimes := make([][]time.Duration, devices)
	ent := &entries{}
	peaks := make([]int64, devices)
	errs := make([]error, devices)
	var wg sync.WaitGroup
	for r := 0; r < devices; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			tc := &timedComm{Comm: comms[r], entries: ent}
			net, err := shard.New(shard.Config{
				Model: model, Mode: mode, Strategy: strategy, Devices: devices, Rank: r, Comm: tc,
				BatchPerDevice: batch, GradientsMean: true, Seed: 1, Threads: 1,
			})
			if err != nil {
				errs[r] = err
				return
			}
			defer net.Close()
			var trainable []*nn.Param
			for _, p := range net.Params() {
				if p.Trainable {
					trainable = append(trainable, p)
				}
			}
			opt, err := optim.NewMomentum(trainable, optim.MomentumConfig{LearningRates: []float32{0.01}, Momentum: 0.9})
			if err != nil {
				errs[r] = err
				return
			}
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			x, _ := tensor.New(batch, 3, 32, 32)
			for i := range x.Data() {
				x.Data()[i] = float32(rng.NormFloat64())
			}
			labels := make([]int32, batch)
			for i := range labels {
				labels[i] = int32(rng.IntN(10))
			}
			for s := 0; s < 2+steps; s++ {
				before, waitedBefore := tc.spent.Load(), tc.waited.Load()
				began := time.Now()
				if _, err := net.TrainStep(context.Background(), x, labels); err != nil {
					errs[r] = err
					return
				}
				opt.Step()
				if s >= 2 {
					stepTimes[r] = append(stepTimes[r], time.Since(began))
					commTimes[r] = append(commTimes[r], time.Duration(tc.spent.Load()-before))
					waitTimes[r] = append(waitTimes[r], time.Duration(tc.waited.Load()-waitedBefore))
				}
			}
			_, peaks[r] = net.Device().MemoryInUse()
		}(r)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, 0, 0, err
	}
	return median(stepTimes[0]), median(commTimes[0]), median(waitTimes[0]), slices.Max(peaks), nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// connect joins devices in-process ranks over loopback.
func connect(devices int, tr collective.Transport) ([]*collective.Comm, error) {
	lns := make([]net.Listener, devices)
	addrs := make([]string, devices)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	secret, err := collective.NewSecret()
	if err != nil {
		return nil, err
	}
	out := make([]*collective.Comm, devices)
	errs := make([]error, devices)
	var wg sync.WaitGroup
	for i := 0; i < devices; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i], errs[i] = collective.Init(context.Background(), collective.Config{
				Rank: i, Size: devices, Addrs: addrs, Secret: secret, Timeout: 60 * time.Second, Listener: lns[i], Transport: tr,
			})
		}(i)
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
