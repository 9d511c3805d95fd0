// Package shard provides the operator-parallel training engine: a network
// split across the ranks of a job by per-operator shard strategies
// (semi_auto_parallel, and auto_parallel once a strategy is searched) or by
// the model's own split (hybrid_parallel).
//
// # Overview
//
//	g, err := shard.GraphOf("semi_auto_net", 64) // validation, strategy search
//	net, err := shard.New(shard.Config{
//		Model: "semi_auto_net", Mode: parallel.SemiAutoParallel,
//		Strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}},
//		Devices: 8, Rank: rank, Comm: comm, BatchPerDevice: 8, GradientsMean: true,
//	})
//	loss, err := net.TrainStep(ctx, images, labels) // then an optimizer steps net.Params()
//
// # How a step runs
//
// A network is a chain of operators ([parallel.Graph]). Each rank runs every
// operator on its slice: the layer is built with the slice shapes, so the
// simulated device memory counts only the slices. Every tensor between two
// operators is held complete: a rank's slice of an activation or of a
// gradient carries final values, never a partial sum. So:
//
//   - between operators, the input is redistributed from the layout the
//     previous operator left to the one the next expects by copying boxes
//     (one Exchange; each needed box is read from one holder, chosen
//     deterministically), and gradients go the reverse way the same way;
//   - an operator whose contraction dimension is split sums its output over
//     the ranks that split it (GroupAllReduce) before the next operator;
//   - in backward, an input gradient or a parameter gradient that is partial
//     over some device matrix axes is summed over them.
//
// Ranks that repeat a calculation compute bit-identical values, and every
// reduction runs in group order, so all replicas of a slice stay
// bit-identical after every step.
//
// # Loss and gradient scale
//
// In semi_auto_parallel and auto_parallel the loss is the mean over the
// global batch, so the gradients equal stand_alone's on that batch; with
// GradientsMean false they are the sum of the per-device mean gradients
// (MindSpore's allreduce sum), that is Devices times as large. In
// hybrid_parallel each device's loss is the mean over the batch rows its loss
// operator sees, as a MindSpore script written per device computes it;
// layerwise_parallel parameters keep their own gradients and every other
// gradient is all-reduced (mean, or sum without GradientsMean) over all
// devices; the model's explicit AllReduce operator sums a partial output in
// forward and passes the gradient through unchanged.
//
// # BatchNorm
//
// A BatchNorm whose batch is split normalises with the statistics of its
// slice, as MindSpore's data-parallel BatchNorm does; its moving statistics
// are then averaged over the ranks that split the batch after each step, so
// the replicas of a checkpointed slice agree.
package shard
