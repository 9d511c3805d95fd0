package shard

import (
	"fmt"
	"testing"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/parallel/auto"
)

// TestAutoEqualsStandAlone trains semi_auto_net for 10 steps in
// auto_parallel on 2, 4 and 8 ranks with the strategy the cost model's
// search picks for slow devices (1 GFLOP/s, so that splitting the compute
// pays for the communication even on this small network), and checks
// the gathered parameters against stand_alone on the same global batch.
// The search must split some operator beyond the batch, or the test would
// only repeat data parallel.
func TestAutoEqualsStandAlone(t *testing.T) {
	const global, steps = 16, 10
	xs, ys := batches(steps, global, 5)
	base := Config{Model: "semi_auto_net", Mode: parallel.StandAlone, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: 9, Threads: 1}
	alone := trainRanks(t, base, nil, xs, ys)
	g, err := GraphOf("semi_auto_net", global)
	if err != nil {
		t.Fatal(err)
	}
	// Slow links make fc.weight's gradient reduction (1.5 MiB) cost more
	// than moving activations, so the search splits beyond the batch.
	slow := auto.DefaultMachine()
	slow.FLOPS = 1e9
	slow.IntraServer.Bandwidth = 1e8
	for _, d := range []int{2, 4, 8} {
		plan, err := auto.Search(g, d, slow)
		if err != nil {
			t.Fatal(err)
		}
		if !splitsBeyondBatch(g, plan.Strategy) {
			t.Fatalf("%d devices: the search chose %v, which splits no operator beyond the batch", d, plan.Strategy)
		}
		t.Run(fmt.Sprintf("%d ranks", d), func(t *testing.T) {
			cfg := base
			cfg.Mode, cfg.Devices, cfg.BatchPerDevice, cfg.Strategy = parallel.AutoParallel, d, global/d, plan.Strategy
			res := trainRanks(t, cfg, realComms(t, d, collective.TransportTCP), xs, ys)
			worst := compare(t, res.gathered, alone.gathered, 1e-5)
			checkReplicas(t, res)
			t.Logf("strategy %v: largest relative difference %.3g", plan.Strategy, worst)
		})
	}
}

// splitsBeyondBatch reports whether s splits some dimension of some
// operator's input other than the first (the batch) of the first input.
func splitsBeyondBatch(g parallel.Graph, s parallel.Strategy) bool {
	for _, o := range g.Ops {
		for i, in := range s[o.Name] {
			for k, ways := range in {
				if ways > 1 && (i > 0 || k > 0) {
					return true
				}
			}
		}
	}
	return false
}
