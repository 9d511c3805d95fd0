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

// probeCollectives times each collective kind the engine calls among
// devices in-process ranks, with tiny buffers (a call's fixed cost) and
// large ones (its bandwidth), against what machine m predicts for them.
//
// It also returns m with the links fitted to the measurements: each
// kind's latency is its tiny call, its bandwidth what the large call adds.
func probeCollectives(devices int, tr collective.Transport, m auto.Machine) ([]component, auto.Machine, error) {
	comms, err := connect(devices, tr)
	if err != nil {
		return nil, m, err
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	all := make([]int, devices)
	for i := range all {
		all[i] = i
	}
	// Whole-job buffers come from Alloc, as the engine's gradient buckets.
	const big = 4 << 20 // elements: 16 MiB
	whole := make([][]float32, devices)
	var wg sync.WaitGroup
	errs := make([]error, devices)
	for r := range devices {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			whole[r], errs[r] = comms[r].Alloc(context.Background(), big)
		}(r)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, m, err
	}
	type probe struct {
		name  string
		kind  auto.Collective
		elems int // per rank: the buffer reduced, or sent to each peer
		call  func(ctx context.Context, c *collective.Comm, r int) error
	}
	exchange := func(per int) func(ctx context.Context, c *collective.Comm, r int) error {
		send, recv := make([][][]float32, devices), make([][][]float32, devices)
		for r := range devices {
			send[r], recv[r] = make([][]float32, devices), make([][]float32, devices)
			for p := range devices {
				send[r][p], recv[r][p] = make([]float32, per), make([]float32, per)
			}
		}
		return func(ctx context.Context, c *collective.Comm, r int) error { return c.Exchange(ctx, send[r], recv[r]) }
	}
	group := func(n int) func(ctx context.Context, c *collective.Comm, r int) error {
		bufs := make([][]float32, devices)
		for r := range bufs {
			bufs[r] = make([]float32, n)
		}
		return func(ctx context.Context, c *collective.Comm, r int) error {
			return c.GroupAllReduce(ctx, bufs[r], collective.Sum, all)
		}
	}
	wholeReduce := func(n int) func(ctx context.Context, c *collective.Comm, r int) error {
		return func(ctx context.Context, c *collective.Comm, r int) error {
			return c.AllReduce(ctx, whole[r][:n], collective.Sum)
		}
	}
	const bigPeer = 64 << 10 // elements each rank sends each peer: 256 KiB
	probes := []probe{
		{"AllReduce, whole job, 1 element", auto.WholeAllReduce, 1, wholeReduce(1)},
		{"AllReduce, whole job, 16 MiB", auto.WholeAllReduce, big, wholeReduce(big)},
		{"GroupAllReduce, 1 element", auto.GroupAllReduce, 1, group(1)},
		{"GroupAllReduce, 4 MiB", auto.GroupAllReduce, 1 << 20, group(1 << 20)},
		{"Exchange, 1 element a peer", auto.Redistribution, 1, exchange(1)},
		{"Exchange, 256 KiB a peer", auto.Redistribution, bigPeer, exchange(bigPeer)},
	}
	var out []component
	took0 := map[auto.Collective][]float64{} // each kind's small and large call
	for _, pr := range probes {
		calls := 20
		if pr.elems > 1 {
			calls = 6
		}
		took := make([]time.Duration, devices)
		for r := range devices {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				ctx := context.Background()
				for range 2 { // warm-up: first touches of shared pages
					if errs[r] = pr.call(ctx, comms[r], r); errs[r] != nil {
						return
					}
				}
				began := time.Now()
				for range calls {
					if errs[r] = pr.call(ctx, comms[r], r); errs[r] != nil {
						return
					}
				}
				took[r] = time.Since(began) / time.Duration(calls)
			}(r)
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, m, fmt.Errorf("%s: %w", pr.name, err)
		}
		var slowest time.Duration
		for _, d := range took {
			slowest = max(slowest, d)
		}
		var want float64
		bytes := int64(pr.elems) * auto.BytesPerElement
		if pr.kind == auto.Redistribution {
			want = m.ExchangeSeconds(bytes*int64(devices-1), false)
		} else {
			want = m.AllReduceSeconds(pr.kind, bytes, devices, false)
		}
		out = append(out, component{pr.name, slowest.Seconds(), want, "s"})
		took0[pr.kind] = append(took0[pr.kind], slowest.Seconds())
	}
	fitted := m
	for kind, ts := range took0 {
		small, large := ts[0], ts[1]
		var moved float64 // bus bytes of the large call
		if kind == auto.Redistribution {
			moved = float64(bigPeer * auto.BytesPerElement * (devices - 1))
		} else {
			n := map[auto.Collective]int{auto.WholeAllReduce: big, auto.GroupAllReduce: 1 << 20}[kind]
			moved = 2 * float64(devices-1) / float64(devices) * float64(n*auto.BytesPerElement)
		}
		l := auto.Link{Bandwidth: moved / max(large-small, 1e-9), Latency: time.Duration(small * 1e9)}
		if kind == auto.WholeAllReduce || !fitted.OverLoopback.Has(kind) {
			fitted.IntraServer = l
		} else {
			fitted.Loopback[kind] = l
		}
	}
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
	concurrent := func(f measure, n int) (float64, error) {
		rates := make([]float64, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				rates[i], errs[i] = f(context.Background(), d)
			}(i)
		}
		wg.Wait()
		sum := 0.0
		for _, r := range rates {
			sum += r
		}
		return sum / float64(n), errors.Join(errs...)
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
	alone.FLOPS, alone.MemoryBandwidth, alone.TransposedBandwidth = measuredOne[0], measuredOne[1], measuredOne[2]
	shared.FLOPS, shared.MemoryBandwidth, shared.TransposedBandwidth = measuredEach[0], measuredEach[1], measuredEach[2]
	return out, alone, shared, nil
}
