// Package auto provides auto_parallel for the NPU training core: a cost
// model that predicts the step time and memory per rank of a network
// ([parallel.Graph]) under a shard strategy, and a search for the
// strategy of least predicted step time that fits the device memory.
//
//	plan, err := auto.Search(graph, 8, auto.DefaultMachine())
//	if err != nil { ... }            // errors.Is(err, auto.ErrNoFit): nothing fits
//	plan.Format(os.Stdout)           // per operator: strategy, compute, comm, memory
//	train(plan.Strategy)             // a semi_auto_parallel strategy naming every operator
//
// [Evaluate] prices a given strategy instead; the empty strategy is pure
// data parallel.
//
// # Cost model
//
// A [Machine] gives a device's FLOP/s, the bandwidth and latency of links
// within and between servers, and a device's memory. Per operator and
// training step, on one rank:
//
//   - compute: forward FLOPs, plus one forward's worth for the input
//     gradient and another for parameter gradients, divided over the
//     devices the strategy uses (repeated devices do the same work at the
//     same time) and by the FLOP/s;
//   - communication: a ring AllReduce (2(g−1)/g·bytes, plus a latency) of
//     a partial output (a split contraction dimension), of a partial input
//     gradient, and of the parameter gradients of each reduction group
//     (fused into one call per operator, a latency each, where a trainer
//     reducing one flat buffer pays one per step; the data-parallel
//     gradient AllReduce is the case where the group is every device);
//     and the redistribution of the
//     input from the previous operator's output layout, forward and
//     backward: the bytes each rank must receive, from the intersections
//     of its new box with the boxes of the old layout (AllGather, split and
//     AllToAll are all cases of it), at the speed of the slowest link used;
//   - memory: the parameter slices three times (value, gradient, momentum;
//     with the parallel optimizer only this rank's piece of the momentum,
//     the pieces by parallel.OptimizerPieces, the rule npu/shard runs),
//     four times when the gradient is reduced across ranks (npu/shard packs
//     it into a reduction buffer; a gradient reduce-scattered over the
//     ranks that split its update needs the others' parts of its piece,
//     and all of a plan's reduce-scatters share the largest such buffer);
//     a frozen parameter (BatchNorm's moving statistics) only its value,
//     and its reduction buffer when averaged across ranks; the output slice
//     kept for the backward pass, and the slice of the input batch and
//     labels read.
//
// Step time is the sum over operators; communication is not overlapped
// with computation. Peak memory is the sum of every operator's memory (all
// activations are alive at the end of the forward pass). A parameter
// several operators use is counted once, at its first user.
//
// # Search
//
// MindSpore offers two searches (auto_parallel_search_mode):
// "dynamic_programming", which finds the optimal strategy under its cost
// model, and "recursive_programming", a faster heuristic on a symbolic
// cost model. This package follows dynamic_programming. On a chain of
// operators its graph eliminations reduce to a dynamic programme along the
// chain: the state is an operator's candidate strategy, the transition
// cost the redistribution between consecutive candidates.
//
// The memory cap is a second dimension of the state, kept exact: for each
// candidate of each operator the search keeps the Pareto front of (time,
// memory) over the plans ending there, and drops points over the cap as
// soon as they appear (memory only grows along the chain). A Lagrangian
// penalty on memory would be cheaper but can miss the best plan that fits
// (a duality gap); a quantised memory axis would round. Fronts stay
// small, since memory takes few distinct values (at most 30 points for the
// test networks on up to 64 devices under a binding cap); a front past
// 256 points is thinned, keeping its fastest point, to bound the search.
// The result therefore equals brute force on small graphs (a test checks
// it), and is never slower by the model than pure data parallel when that
// fits.
//
// The candidates of an operator ([Candidates]) are every assignment of a
// number of slices to each dimension label it may split, whose product
// divides the device count and where each number divides every dimension
// carrying the label. A parameter used by several operators is kept whole,
// which satisfies MindSpore's rule of one strategy per parameter without
// coupling those operators' choices.
package auto
