package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/parallel/auto"
)

// component is one measured quantity beside the machine model's figure.
type component struct {
	name      string
	measured  float64 // seconds, or a rate
	predicted float64
	unit      string
}

// collectiveProbe is one collective call the engine makes, timed with a
// tiny buffer (its fixed cost) and a large one (its bandwidth).
type collectiveProbe struct {
	name  string
	kind  auto.Collective
	elems int // per rank: the buffer reduced, or the block sent to each peer
}

const (
	bigReduce = 4 << 20  // elements of the whole-job AllReduce: 16 MiB
	bigGroup  = 1 << 20  // of the GroupAllReduce: 4 MiB
	bigPeer   = 64 << 10 // each rank sends each peer in Exchange: 256 KiB
)

var collectiveProbes = []collectiveProbe{
	{"AllReduce, whole job, 1 element", auto.WholeAllReduce, 1},
	{"AllReduce, whole job, 16 MiB", auto.WholeAllReduce, bigReduce},
	{"GroupAllReduce, 1 element", auto.GroupAllReduce, 1},
	{"GroupAllReduce, 4 MiB", auto.GroupAllReduce, bigGroup},
	{"Exchange, 1 element a peer", auto.Redistribution, 1},
	{"Exchange, 256 KiB a peer", auto.Redistribution, bigPeer},
}

// probeRank runs every collective probe on one rank process and returns
// the mean time of a call of each, after two warm-up calls (the first
// touches of shared pages).
func probeRank(j rankJob, c *collective.Comm) ([]time.Duration, error) {
	ctx := context.Background()
	all := make([]int, j.Devices)
	for i := range all {
		all[i] = i
	}
	whole, err := c.Alloc(ctx, bigReduce) // as the engine's gradient buckets
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, pr := range collectiveProbes {
		var call func() error
		switch pr.kind {
		case auto.WholeAllReduce:
			buf := whole[:pr.elems]
			call = func() error { return c.AllReduce(ctx, buf, collective.Sum) }
		case auto.GroupAllReduce:
			buf := make([]float32, pr.elems)
			call = func() error { return c.GroupAllReduce(ctx, buf, collective.Sum, all) }
		default:
			send, recv := make([][]float32, j.Devices), make([][]float32, j.Devices)
			for p := range send {
				send[p], recv[p] = make([]float32, pr.elems), make([]float32, pr.elems)
			}
			call = func() error { return c.Exchange(ctx, send, recv) }
		}
		calls := 20
		if pr.elems > 1 {
			calls = 6
		}
		for range 2 {
			if err := call(); err != nil {
				return nil, fmt.Errorf("%s: %w", pr.name, err)
			}
		}
		began := time.Now()
		for range calls {
			if err := call(); err != nil {
				return nil, fmt.Errorf("%s: %w", pr.name, err)
			}
		}
		out = append(out, time.Since(began)/time.Duration(calls))
	}
	return out, nil
}

// probeCollectives times each collective kind the engine calls among
// devices rank processes (the slowest rank's time of a call) against what
// machine m predicts. It also returns m with the links fitted to the
// measurements: each kind's latency is its tiny call, its bandwidth what
// the large call adds.
func probeCollectives(devices int, tr collective.Transport, m auto.Machine) ([]component, auto.Machine, error) {
	res, err := spawn(rankJob{Kind: "probe", Devices: devices, Transport: tr.String()})
	if err != nil {
		return nil, m, err
	}
	var out []component
	took := map[auto.Collective][]float64{} // each kind's small and large call
	for i, pr := range collectiveProbes {
		var slowest time.Duration
		for _, r := range res {
			if len(r.Probes) != len(collectiveProbes) {
				return nil, m, fmt.Errorf("a rank reported %d probes, want %d", len(r.Probes), len(collectiveProbes))
			}
			slowest = max(slowest, r.Probes[i])
		}
		var want float64
		bytes := int64(pr.elems) * auto.BytesPerElement
		if pr.kind == auto.Redistribution {
			want = m.ExchangeSeconds(bytes*int64(devices-1), false)
		} else {
			want = m.AllReduceSeconds(pr.kind, bytes, devices, false)
		}
		out = append(out, component{pr.name, slowest.Seconds(), want, "s"})
		took[pr.kind] = append(took[pr.kind], slowest.Seconds())
	}
	// Each kind gets its own link within a server: the whole-job
	// AllReduce is IntraServer, the others IntraServerByKind. SendRecv is
	// an Exchange of two ranks, so it takes Exchange's link.
	fitted := m
	for _, kind := range []auto.Collective{auto.WholeAllReduce, auto.GroupAllReduce, auto.Redistribution} {
		ts := took[kind]
		small, large := ts[0], ts[1]
		var moved float64 // bus bytes of the large call
		switch kind {
		case auto.Redistribution:
			moved = float64(bigPeer * auto.BytesPerElement * (devices - 1))
		case auto.WholeAllReduce:
			moved = 2 * float64(devices-1) / float64(devices) * bigReduce * auto.BytesPerElement
		default:
			moved = 2 * float64(devices-1) / float64(devices) * bigGroup * auto.BytesPerElement
		}
		l := auto.Link{Bandwidth: moved / max(large-small, 1e-9), Latency: time.Duration(small * 1e9)}
		if kind == auto.WholeAllReduce {
			fitted.IntraServer = l
		} else {
			fitted.IntraServerByKind[kind] = l
		}
	}
	fitted.IntraServerByKind[auto.StageSendRecv] = fitted.IntraServerByKind[auto.Redistribution]
	return out, fitted, nil
}

// probeCompute measures the GEMM rate and the optimizer loop's memory
// bandwidth on one goroutine alone, then on devices goroutines at once
// (each one's rate, the mean), against the machine model's figures for
// one device with a core to itself (alone) and for devices sharing the
// cores. It also returns alone and shared with those figures replaced by
// the measured ones.
func probeCompute(devices int, alone, shared auto.Machine) ([]component, auto.Machine, auto.Machine, error) {
	const d = 300 * time.Millisecond
	type measure func(context.Context, time.Duration) (float64, error)
	// concurrent runs f on n goroutines at once and returns the work they
	// did together (each one's rate times its time) over the time they
	// took together, per goroutine: a mean of the rates would favour the
	// goroutines that ran while others waited.
	concurrent := func(f measure, n int) (float64, error) {
		work := make([]float64, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		began := time.Now()
		for i := range n {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				start := time.Now()
				rate, err := f(context.Background(), d)
				work[i], errs[i] = rate*time.Since(start).Seconds(), err
			}(i)
		}
		wg.Wait()
		took := time.Since(began).Seconds()
		sum := 0.0
		for _, w := range work {
			sum += w
		}
		return sum / took / float64(n), errors.Join(errs...)
	}
	var out []component
	var measuredOne, measuredEach []float64
	for _, c := range []struct {
		name       string
		f          measure
		one, share float64
		unit       string
	}{
		{"GEMM 16×16384×144, one thread", auto.MeasureFLOPS, alone.FLOPS, shared.FLOPS, "FLOP/s"},
		{"optimizer loop, memory", auto.MeasureMemoryBandwidth, alone.MemoryBandwidth, shared.MemoryBandwidth, "B/s"},
		{"weight read transposed (dy·wᵀ, 4×3072×4096)", auto.MeasureTransposedBandwidth, alone.TransposedBandwidth, shared.TransposedBandwidth, "B/s"},
		{"weight gradient written (xᵀ·dy, 3072×4×4096)", auto.MeasureWeightGradBandwidth, alone.WeightGradBandwidth, shared.WeightGradBandwidth, "B/s"},
	} {
		one, err := concurrent(c.f, 1)
		if err != nil {
			return nil, alone, shared, err
		}
		each, err := concurrent(c.f, devices)
		if err != nil {
			return nil, alone, shared, err
		}
		measuredOne = append(measuredOne, one)
		measuredEach = append(measuredEach, each)
		out = append(out,
			component{c.name + ", alone", one, c.one, c.unit},
			component{fmt.Sprintf("%s, each of %d at once", c.name, devices), each, c.share, c.unit})
	}
	alone.FLOPS, alone.MemoryBandwidth, alone.TransposedBandwidth, alone.WeightGradBandwidth = measuredOne[0], measuredOne[1], measuredOne[2], measuredOne[3]
	shared.FLOPS, shared.MemoryBandwidth, shared.TransposedBandwidth, shared.WeightGradBandwidth = measuredEach[0], measuredEach[1], measuredEach[2], measuredEach[3]
	return out, alone, shared, nil
}
