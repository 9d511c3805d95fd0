package shard

import (
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/parallel/auto"
)

// held returns what net's device reserves under what, measured on the
// device: the bytes in use fall by that much when the reservation is
// released (which leaves net unusable: only for a net about to be
// closed).
func held(t *testing.T, net *Net, what string) int64 {
	t.Helper()
	before, _ := net.Device().MemoryInUse()
	if err := net.Device().Reserve(what, 0); err != nil {
		t.Fatal(err)
	}
	after, _ := net.Device().MemoryInUse()
	return before - after
}

// TestPlanPricesParamStateAsDeviceHolds builds rank 0 of resnet20 in
// data_parallel with the parallel optimizer and compares what its
// simulated device reserves for the parameters, their gradients, the
// optimizer moments and the gradient reduction buffers with the cost
// model's parameter memory (mspipe plan's and auto_parallel's) for the
// same job: BatchNorm's moving statistics are frozen, so they take their
// value (and their room in the bucket that averages them) but no gradient
// and no moment, and the optimizer leaves them whole.
func TestPlanPricesParamStateAsDeviceHolds(t *testing.T) {
	for _, tc := range []struct {
		devices, shardSize int
	}{
		{4, 2}, // gradients all-reduced over 4, moments in halves
		{8, 0}, // gradients reduce-scattered over the 8 that split them
	} {
		const batch = 2
		cfg := Config{Model: "resnet20", Mode: parallel.DataParallel, Devices: tc.devices, Comm: memComms(tc.devices)[0],
			BatchPerDevice: batch, GradientsMean: true, Seed: 1, Threads: 1, ParallelOptimizer: true, OptimizerShardSize: tc.shardSize}
		net, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var frozen, pieces int
		boxes := net.PieceBoxes()
		for _, p := range net.Params() {
			if p.Trainable {
				continue
			}
			frozen++
			if _, ok := boxes[p.Name]; ok {
				pieces++
			}
		}
		if frozen == 0 || pieces != 0 {
			t.Fatalf("%d devices: %d frozen parameters, %d of them optimizer-split", tc.devices, frozen, pieces)
		}
		var device int64
		for _, what := range []string{"resnet20 parameters", "resnet20 gradients", "optimizer moments", "gradient reduction buffers", "gradient reduce-scatter buffers"} {
			n := held(t, net, what)
			t.Logf("%d devices, shard size %d: %s %d bytes", tc.devices, tc.shardSize, what, n)
			device += n
		}
		net.Close()

		g, err := GraphOf("resnet20", batch*tc.devices)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := auto.Evaluate(g, nil, tc.devices, auto.DefaultMachine(), auto.ParallelOptimizer(tc.shardSize))
		if err != nil {
			t.Fatal(err)
		}
		var priced int64
		for _, c := range plan.Ops {
			priced += c.ParamMemory
		}
		t.Logf("%d devices, shard size %d: device %d bytes, cost model %d", tc.devices, tc.shardSize, device, priced)
		if priced != device {
			t.Errorf("%d devices, shard size %d: the cost model prices parameters, gradients, moments and reduction buffers at %d bytes, the device reserves %d (%+.1f%%)",
				tc.devices, tc.shardSize, priced, device, 100*float64(priced-device)/float64(device))
		}
	}
}
