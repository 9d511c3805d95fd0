// Command parallel measures one training step of a network in every
// parallel mode on the same global batch (stand_alone, data_parallel,
// semi_auto_parallel, auto_parallel, and hybrid_parallel on a model that
// splits itself), with the time spent in collectives shown apart, and
// prints what the cost model (the local machine npu/train plans with)
// predicts for each beside what was measured. It first measures the
// model's components (GEMM, memory, each collective kind) beside the
// model's figures.
//
// Each rank is a process of its own with one compute thread (this program
// re-executed), joined by real collectives (shared memory or loopback
// TCP), as npu/train runs a job's ranks.
//
//	go run ./bench/parallel                          # wide_net on 8 devices
//	go run ./bench/parallel -model semi_auto_net -strategy '{"fc.matmul":[[1,1],[1,2]]}'
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/parallel/auto"
	"github.com/mspipe/mspipe/npu/shard"
)

func main() {
	if spec := os.Getenv(rankEnv); spec != "" {
		if err := rankMain(spec); err != nil {
			fmt.Fprintln(os.Stderr, "bench/parallel rank:", err)
			os.Exit(1)
		}
		return
	}
	model := flag.String("model", "wide_net", "model (one of "+fmt.Sprint(shard.Models())+")")
	hybridModel := flag.String("hybrid-model", "hybrid_net", "model for hybrid_parallel, which splits itself (\"\" to skip)")
	devices := flag.Int("devices", 8, "simulated devices (ranks)")
	batch := flag.Int("batch", 4, "batch per device; the global batch is batch × devices")
	steps := flag.Int("steps", 6, "timed steps (after 2 warm-up steps)")
	strategyJSON := flag.String("strategy", `{"fc.matmul":[[1,1],[1,8]]}`, "semi_auto_parallel strategy as JSON (\"\" to skip)")
	transport := flag.String("transport", "shm", "collective transport: shm or tcp")
	components := flag.Bool("components", true, "measure the machine model's components first (GEMM, memory, each collective kind)")
	flag.BoolVar(&detail, "detail", false, "print rank 0's collective calls of the last step to stderr")
	flag.Parse()
	if err := run(*model, *hybridModel, *devices, *batch, *steps, *strategyJSON, *transport, *components); err != nil {
		fmt.Fprintln(os.Stderr, "bench/parallel:", err)
		os.Exit(1)
	}
}

var detail bool

// benchMode is one way of training the global batch.
type benchMode struct {
	name     string
	model    string
	mode     parallel.Mode
	devices  int
	strategy parallel.Strategy // what the ranks are given
	priced   parallel.Strategy // what the cost model prices
}

func run(model, hybridModel string, devices, batch, steps int, strategyJSON, transportName string, components bool) error {
	tr, err := collective.ParseTransport(transportName)
	if err != nil {
		return err
	}
	global := batch * devices
	g, err := shard.GraphOf(model, global)
	if err != nil {
		return err
	}
	// The ranks here compute on one thread each (shard.Config.Threads).
	alone, shared := job.MachineFor(1, 1, 0), job.MachineFor(devices, 1, 0)

	plan, err := auto.Search(g, devices, shared)
	if err != nil {
		return err
	}
	modes := []benchMode{
		{"stand_alone", model, parallel.StandAlone, 1, nil, nil},
		{"data_parallel", model, parallel.DataParallel, devices, nil, nil},
	}
	if strategyJSON != "" {
		var s parallel.Strategy
		if err := json.Unmarshal([]byte(strategyJSON), &s); err != nil {
			return fmt.Errorf("-strategy: %w", err)
		}
		modes = append(modes, benchMode{"semi_auto_parallel", model, parallel.SemiAutoParallel, devices, s, s})
	}
	modes = append(modes, benchMode{"auto_parallel", model, parallel.AutoParallel, devices, plan.Strategy, plan.Strategy})
	if hybridModel != "" {
		s, ok := shard.Declared(hybridModel, global, devices)
		if !ok {
			return fmt.Errorf("-hybrid-model %s does not split itself", hybridModel)
		}
		modes = append(modes, benchMode{"hybrid_parallel", hybridModel, parallel.HybridParallel, devices, nil, s})
	}

	fmt.Printf("%s, %d devices, global batch %d, transport %s, %d CPUs (GOMAXPROCS %d), one compute thread a rank, %d timed steps; load average %s\n",
		model, devices, global, tr, runtime.NumCPU(), runtime.GOMAXPROCS(0), steps, loadAverage())
	if tr == collective.TransportTCP {
		fmt.Print("every collective over loopback TCP\n\n")
	} else {
		fmt.Print("shared memory between the ranks for every collective: gradient buckets in Alloc memory, " +
			"Exchange and group reductions through staging memory\n\n")
	}
	var fitAlone, fitShared auto.Machine
	if components {
		if fitAlone, fitShared, err = printComponents(devices, tr, alone, shared); err != nil {
			return err
		}
	}
	fmt.Println("| mode | model | strategy | step (measured) | of it in collectives | of that, waiting for the last peer to enter | then for the peers to stage their data | then to run again | cores the ranks used | step (predicted) | predicted / measured | comm (predicted) | peak memory per rank (measured) | (predicted) | step (predicted from this run's components) |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, m := range modes {
		machine, fitted := shared, fitShared
		if m.devices == 1 {
			machine, fitted = alone, fitAlone
		}
		mg, err := shard.GraphOf(m.model, global)
		if err != nil {
			return err
		}
		perDevice := global / m.devices
		predicted := "- | - | -"
		var predMemory int64
		p, perr := auto.Evaluate(mg, m.priced, m.devices, machine)
		got, merr := measure(m.model, m.mode, m.strategy, m.devices, perDevice, steps, tr)
		step := got.step
		if perr == nil {
			predMemory = p.PeakMemory
			ratio := "-"
			if merr == nil {
				ratio = fmt.Sprintf("%+.0f%%", (p.StepSeconds/step.Seconds()-1)*100)
			}
			predicted = fmt.Sprintf("%.1f ms | %s | %.1f ms", p.StepSeconds*1e3, ratio, p.CommSeconds*1e3)
		}
		strategy := "-"
		if len(m.strategy) > 0 {
			b, _ := json.Marshal(m.strategy)
			strategy = "`" + string(b) + "`"
		} else if m.mode == parallel.HybridParallel {
			strategy = "the model's own"
		}
		measured := fmt.Sprintf("%.1f ms | %.1f ms (%.0f%%) | %.1f ms | %.1f ms | %.1f ms | %.2f", ms(step), ms(got.comm), 100*got.comm.Seconds()/step.Seconds(),
			ms(got.skew), ms(got.staging), ms(got.wake), got.cores)
		if merr != nil {
			measured = fmt.Sprintf("failed: %v | - | - | - | - | -", merr)
		}
		refit := "-"
		if components && merr == nil {
			if p, err := auto.Evaluate(mg, m.priced, m.devices, fitted); err == nil {
				refit = fmt.Sprintf("%.1f ms (%+.0f%%)", p.StepSeconds*1e3, (p.StepSeconds/step.Seconds()-1)*100)
			}
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", m.name, m.model, strategy, measured, predicted, bytesize.Format(got.peak), bytesize.Format(predMemory), refit)
	}
	return nil
}

// printComponents measures the machine model's components and prints them
// beside the model's figures.
// It returns the machines with the measured figures.
func printComponents(devices int, tr collective.Transport, alone, shared auto.Machine) (auto.Machine, auto.Machine, error) {
	comp, fitAlone, fitShared, err := probeCompute(devices, alone, shared)
	if err != nil {
		return alone, shared, err
	}
	coll, fitShared, err := probeCollectives(devices, tr, fitShared)
	if err != nil {
		return alone, shared, err
	}
	fmt.Println("| component | measured | model | model / measured |")
	fmt.Println("|---|---:|---:|---:|")
	for _, c := range append(comp, coll...) {
		f := func(v float64) string {
			if c.unit == "s" {
				return fmt.Sprintf("%.3f ms", v*1e3)
			}
			return fmt.Sprintf("%.2f G%s", v/1e9, c.unit)
		}
		fmt.Printf("| %s | %s | %s | %+.0f%% |\n", c.name, f(c.measured), f(c.predicted), (c.predicted/c.measured-1)*100)
	}
	fmt.Println()
	return fitAlone, fitShared, nil
}

// loadAverage returns the 1, 5 and 15 minute load averages, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// timedComm counts the time a rank spends inside collectives, split by
// the communicator's own timestamps (collective.CallTimes) into waiting for
// the last peer to enter the call, then for the peers to stage their data,
// then for this rank to run again after they had, and the rest (its own
// copying and reducing); with -detail it keeps each call.
type timedComm struct {
	*collective.Comm
	spent, skew, staging, wake atomic.Int64
	keep                       bool
	events                     []event
}

// event is one collective call: its kind, the elements this rank sent
// (Exchange) or reduced, its time, and the parts of it as in timedComm.
type event struct {
	kind                string
	elems               int
	d                   time.Duration
	skew, staging, wake time.Duration
}

func (c *timedComm) note(kind string, elems int, began time.Time) {
	d := time.Since(began)
	c.spent.Add(int64(d))
	t := c.LastCall()
	var skew, staging, wake time.Duration
	if !t.PeerEntered.IsZero() && !t.Ready.IsZero() {
		// Each part is clamped to what is left of the call: the stamps of
		// two processes are read at different instants around its edges.
		left := d
		part := func(from, to time.Time) time.Duration {
			p := min(max(to.Sub(from), 0), left)
			left -= p
			return p
		}
		skew = part(t.Entered, t.PeerEntered)
		staging = part(t.Entered.Add(skew), t.PeerStaged)
		wake = part(t.Entered.Add(skew+staging), t.Ready)
	}
	c.skew.Add(int64(skew))
	c.staging.Add(int64(staging))
	c.wake.Add(int64(wake))
	if c.keep {
		c.events = append(c.events, event{kind, elems, d, skew, staging, wake})
	}
}

func (c *timedComm) Exchange(ctx context.Context, send, recv [][]float32) error {
	began := time.Now()
	n := 0
	for p, b := range send {
		if p != c.Rank() {
			n += len(b)
		}
	}
	defer c.note("exchange", n, began)
	return c.Comm.Exchange(ctx, send, recv)
}

// AllReduce is what the engine reduces whole-job gradient buckets with
// (through shared memory on one host).
func (c *timedComm) AllReduce(ctx context.Context, buf []float32, op collective.Op) error {
	began := time.Now()
	defer c.note("allreduce", len(buf), began)
	return c.Comm.AllReduce(ctx, buf, op)
}

func (c *timedComm) GroupAllReduce(ctx context.Context, buf []float32, op collective.Op, group []int) error {
	began := time.Now()
	defer c.note(fmt.Sprintf("group%d", len(group)), len(buf), began)
	return c.Comm.GroupAllReduce(ctx, buf, op, group)
}
