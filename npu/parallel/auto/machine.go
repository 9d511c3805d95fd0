package auto

import (
	"fmt"
	"time"

	"github.com/mspipe/mspipe/npu/nn"
)

// BytesPerElement is the size of one tensor element: the training core
// computes in float32.
const BytesPerElement = 4

// Link is one kind of connection between ranks.
type Link struct {
	// Bandwidth is the bus bandwidth in bytes/s, as nccl-tests define it:
	// a ring AllReduce of S bytes over g ranks takes 2(g−1)/g·S/Bandwidth.
	// A rank receiving S bytes of a redistribution takes S/Bandwidth.
	Bandwidth float64
	// Latency is the fixed cost of one collective call.
	Latency time.Duration
}

// Collective is a kind of collective call the training engine makes. Within
// a server the kinds may cost differently ([Machine.IntraServerByKind]).
type Collective uint8

// The collective kinds.
const (
	// WholeAllReduce reduces a gradient bucket over every rank of the job.
	WholeAllReduce Collective = iota
	// GroupAllReduce reduces a partial output, a partial input gradient
	// or a gradient bucket over a group of ranks (the loss too).
	GroupAllReduce
	// Redistribution is Exchange (AllToAllv) from one layout to another.
	Redistribution
	// StageSendRecv is a pipeline's send and receive between stages.
	StageSendRecv
)

// numCollectives is the number of collective kinds.
const numCollectives = 4

// KindLinks is a link for each collective kind.
type KindLinks [numCollectives]Link

// Machine is what the cost model knows of the hardware: the speed of one
// device, the links between devices, and each device's memory.
type Machine struct {
	// FLOPS is the sustained float32 FLOP/s of one device.
	FLOPS float64
	// MemoryBandwidth is the bytes/s one device streams through its
	// memory in the loops a step runs besides the products (elementwise
	// operators, the optimizer, packing gradients for their reduction):
	// an operator takes the longer of its FLOPs over FLOPS and its memory
	// traffic over MemoryBandwidth. 0 prices FLOPs alone, and no
	// optimizer or packing time.
	MemoryBandwidth float64
	// TransposedBandwidth is the bytes/s at which the product kernel
	// reads an operand it must transpose: the weight, in a MatMul's input
	// gradient (dy·wᵀ). 0: at MemoryBandwidth.
	TransposedBandwidth float64
	// WeightGradBandwidth is the bytes/s at which the product kernel
	// writes a MatMul's weight gradient (xᵀ·dy), whose small inner
	// dimension (the batch) leaves it bound by the writing. 0: at
	// MemoryBandwidth.
	WeightGradBandwidth float64
	// IntraServer is the link between devices of one server (shared
	// memory here, HCCS on an Ascend server); InterServer the link
	// between servers (TCP). Every kind of collective takes InterServer
	// when its ranks span servers.
	IntraServer, InterServer Link
	// IntraServerByKind[k] is what a collective of kind k costs among
	// devices of one server when that differs from IntraServer: the
	// same shared memory, but a different path through it (this build's
	// Exchange copies each block twice through staging files; a small
	// group reduction costs less than the whole-job one). A zero Link
	// (no bandwidth) means the kind takes IntraServer.
	IntraServerByKind KindLinks
	// DevicesPerServer is how many consecutive ranks share a server.
	DevicesPerServer int
	// Memory is one device's memory in bytes.
	Memory int64
}

// DefaultMachine describes one device a core on the 2-core AMD EPYC
// development VM (with AVX-512) the figures were measured on:
//
//   - FLOPS 115 GFLOP/s, measured: one thread of the GEMM kernel on the
//     convolution-shaped product 16×16384×144 (go test ./npu/tensor -run '^$'
//     -bench 'Gemm$/conv_fwd.*/w1': 114.9 GFLOP/s; square 512: 170). This is
//     one device with a core to itself; see [Machine.ShareCores].
//   - IntraServer 10.8 GB/s, 0.55 ms, measured by go run ./bench/collective:
//     shared-memory AllReduce of 64 MiB over 8 rank processes (bus
//     bandwidth), and its per-call time at small sizes (0.5-0.6 ms).
//   - InterServer 1.0 GB/s, 3.5 ms, measured the same way with -servers 2
//     (8 ranks as 2 × 4: 1.01 GB/s bus bandwidth) and the TCP per-call time
//     at small sizes (3-4 ms).
//   - DevicesPerServer 8: an assumption, HCCL's server of 8 devices.
//   - Memory 32 GiB: an assumption, the HBM of an Ascend 910
//     ([nn.Ascend910Memory]), which is also the trainer's default cap.
//
// It prices FLOPs alone (no MemoryBandwidth) and every kind over the
// shared memory within a server. [LocalMachine] is the simulated devices
// of this build on today's VM (AVX2, no AVX-512), measured afresh.
func DefaultMachine() Machine {
	return Machine{
		FLOPS:            115e9,
		IntraServer:      Link{Bandwidth: 10.8e9, Latency: 550 * time.Microsecond},
		InterServer:      Link{Bandwidth: 1.0e9, Latency: 3500 * time.Microsecond},
		DevicesPerServer: 8,
		Memory:           nn.Ascend910Memory,
	}
}

// ShareCores returns m with FLOPS and MemoryBandwidth scaled for devices
// rank processes of threads compute threads each (0: 1) on cores CPU
// cores, as simulated devices on one small machine run: a device computes
// on min(threads, cores/devices) cores' worth, so 8 devices of one thread
// on 2 cores get a quarter of a core each, and one device of 2 threads
// gets both (taken as twice one core's rate).
func (m Machine) ShareCores(cores, devices, threads int) Machine {
	if cores < 1 || devices < 1 {
		return m
	}
	share := min(float64(max(threads, 1)), float64(cores)/float64(devices))
	m.FLOPS *= share
	m.MemoryBandwidth *= share
	m.TransposedBandwidth *= share
	m.WeightGradBandwidth *= share
	return m
}

// Validate checks that every figure is positive.
func (m Machine) Validate() error {
	switch {
	case !(m.FLOPS > 0):
		return fmt.Errorf("%w: FLOP/s %v, want more than 0", ErrMachine, m.FLOPS)
	case !(m.IntraServer.Bandwidth > 0) || !(m.InterServer.Bandwidth > 0):
		return fmt.Errorf("%w: bandwidths %v (server) and %v (between servers) bytes/s, want more than 0", ErrMachine, m.IntraServer.Bandwidth, m.InterServer.Bandwidth)
	case m.byKindInvalid() != "":
		return fmt.Errorf("%w: the link within a server for %s has a negative bandwidth or latency, or a latency without a bandwidth", ErrMachine, m.byKindInvalid())
	case !(m.MemoryBandwidth >= 0) || !(m.TransposedBandwidth >= 0) || !(m.WeightGradBandwidth >= 0):
		return fmt.Errorf("%w: memory bandwidths %v, %v (transposed) and %v (weight gradient) bytes/s, want 0 (not priced) or more", ErrMachine, m.MemoryBandwidth, m.TransposedBandwidth, m.WeightGradBandwidth)
	case m.IntraServer.Latency < 0 || m.InterServer.Latency < 0:
		return fmt.Errorf("%w: negative latency", ErrMachine)
	case m.DevicesPerServer < 1:
		return fmt.Errorf("%w: %d devices per server, want at least 1", ErrMachine, m.DevicesPerServer)
	case m.Memory < 1:
		return fmt.Errorf("%w: device memory %d bytes, want at least 1", ErrMachine, m.Memory)
	}
	return nil
}

// byKindInvalid returns the name of the first collective kind whose
// link within a server is malformed, or "".
func (m Machine) byKindInvalid() string {
	for k, l := range m.IntraServerByKind {
		if l == (Link{}) {
			continue
		}
		if !(l.Bandwidth > 0) || l.Latency < 0 {
			return Collective(k).String()
		}
	}
	return ""
}

// String names the kind as the engine's call.
func (k Collective) String() string {
	switch k {
	case WholeAllReduce:
		return "AllReduce (whole job)"
	case GroupAllReduce:
		return "GroupAllReduce"
	case Redistribution:
		return "Exchange"
	case StageSendRecv:
		return "SendRecv"
	}
	return fmt.Sprintf("collective kind %d", uint8(k))
}

// link returns the link a collective of kind uses among a group of
// ranks: InterServer when the group spans servers, else the kind's own
// link within a server if it has one, else IntraServer.
func (m Machine) link(kind Collective, acrossServers bool) Link {
	switch {
	case acrossServers:
		return m.InterServer
	case int(kind) < numCollectives && m.IntraServerByKind[kind].Bandwidth > 0:
		return m.IntraServerByKind[kind]
	}
	return m.IntraServer
}

// AllReduceSeconds is the time of a ring AllReduce of kind of bytes bytes
// (each rank's buffer) among group ranks: 2(g−1)/g·bytes over the
// bandwidth, plus one latency. A group of one costs nothing.
func (m Machine) AllReduceSeconds(kind Collective, bytes int64, group int, acrossServers bool) float64 {
	if group <= 1 || bytes <= 0 {
		return 0
	}
	l := m.link(kind, acrossServers)
	return 2*float64(group-1)/float64(group)*float64(bytes)/l.Bandwidth + l.Latency.Seconds()
}

// StreamSeconds is the time one device takes to move bytes through its
// memory: 0 when the machine does not price memory traffic.
func (m Machine) StreamSeconds(bytes int64) float64 {
	if m.MemoryBandwidth <= 0 || bytes <= 0 {
		return 0
	}
	return float64(bytes) / m.MemoryBandwidth
}

// server returns the server of rank.
func (m Machine) server(rank int) int { return rank / m.DevicesPerServer }

// LocalMachine is this build's simulated devices on this machine: devices
// rank processes of threads compute threads each (0: 1) on cores CPU
// cores, sharing them ([Machine.ShareCores]). Its figures were measured on
// the 2-core AMD EPYC VM (Zen 3: AVX2 and FMA, no AVX-512) on 2026-11-28,
// at load averages of 35-50 from other work, with the measuring process's
// scheduling group (its autogroup) at nice -20 so that it ran most of the
// time; go run ./bench/parallel prints each one measured afresh beside
// the model's:
//
//   - FLOPS 24 GFLOP/s: the GEMM kernel on one thread, 16×16384×144
//     ([MeasureFLOPS]), in three runs of the probe alone 21.5-26.7 GFLOP/s
//     (inside bench/parallel, beside other work, 10.3-21.5; the products
//     of wide_net: 32×4096×3072 18.8-26.0, 32×512×3072 30.6).
//
//   - MemoryBandwidth 12 GB/s: the optimizer's loop over 8M elements
//     ([MeasureMemoryBandwidth]): 10.4-13.9 GB/s.
//
//   - TransposedBandwidth 1.5 GB/s: dy·wᵀ of 4×3072 by 3072×4096
//     ([MeasureTransposedBandwidth]): 1.3-1.8 GB/s. The kernel packs a
//     transposed operand 7-8× slower than the loop streams memory; with a
//     small batch this pass is most of a wide layer's step.
//
//   - WeightGradBandwidth 4 GB/s: xᵀ·dy of 3072×4 by 4×4096, a 48 MiB
//     result ([MeasureWeightGradBandwidth]): 3.5-4.9 GB/s, 3× slower
//     than the loop streams memory.
//
//   - Every collective kind goes over shared memory within a server
//     (the whole-job AllReduce in Alloc memory, the others through
//     per-rank staging files), but the kinds cost differently, so each
//     has its own link. bench/parallel's probes time a tiny and a large
//     call of each kind among 8 rank processes back to back; the latency
//     is the tiny call, the bandwidth what the large one adds. Eight runs
//     on 2026-11-28 23:27-23:35 UTC at load averages of 10-19, nice -20
//     as above (shmgroup's collectives, main d39b0d8); each figure below
//     is near the median of the eight:
//
//   - IntraServer 2.0 GB/s, 0.65 ms, the whole-job gradient AllReduce:
//     bus bandwidth of the shared-memory AllReduce among 8 rank processes
//     (go run ./bench/collective -ranks 8 -algorithms shm) 2.5 GB/s at
//     16 MiB, 1.7-2.1 GB/s at 64 MiB; the probes' tiny call 0.48-0.79 ms
//     (their 16 MiB call gives 2.8-4.9 GB/s, but data_parallel reduces
//     50 MB a step, nearer the 64 MiB figure).
//
//   - IntraServerByKind[GroupAllReduce] 0.9 GB/s, 0.4 ms: the probes'
//     GroupAllReduce of all 8 ranks, 1 element 0.31-0.67 ms (median
//     0.37), 4 MiB 0.77-1.08 GB/s bus bandwidth.
//
//   - IntraServerByKind[Redistribution] 0.5 GB/s, 0.55 ms: the probes'
//     Exchange, 1 element a peer 0.45-0.72 ms (median 0.57), 256 KiB a
//     peer 0.37-0.72 GB/s received by each rank (median 0.5): each block
//     is copied twice, into the sender's staging file and out of it.
//
//   - IntraServerByKind[StageSendRecv]: Exchange's, not probed apart:
//     SendRecv is an Exchange on a communicator of two ranks.
//
//   - Inside a step a call often waits longer (0.6-6.5 ms, bench/parallel
//     -detail) for ranks still computing, but that wait is the other
//     ranks' share of the cores, which the shared FLOP/s already price.
//
//   - InterServer: DefaultMachine's (not measured on this VM).
//
//   - More threads than cores: 8 goroutines at once on the GEMM probe did
//     0.86 of twice what one alone did (the work done together over the
//     time taken together, bench/parallel's probe; another run 1.05), and
//     8 rank processes run the split modes' products slower than a
//     linear share of one alone: the devices' FLOP/s are scaled by
//     oversubscribedCompute. (The memory loop gave 0.63 and 1.17 in two
//     runs: no factor.)
//
// The model leaves out: ranks waiting for each other at a collective
// beyond the other ranks' share of the cores; how the devices share the
// memory bandwidth beyond a linear share; a gradient reduction the engine
// makes of parameters every rank computed alike (hybrid_parallel's bias).
func LocalMachine(cores, devices, threads int) Machine {
	m := DefaultMachine()
	m.FLOPS = 24e9
	m.MemoryBandwidth = 12e9
	m.TransposedBandwidth = 1.5e9
	m.WeightGradBandwidth = 4e9
	m.IntraServer = Link{Bandwidth: 2.0e9, Latency: 650 * time.Microsecond}
	exchange := Link{Bandwidth: 0.5e9, Latency: 550 * time.Microsecond}
	m.IntraServerByKind = KindLinks{
		GroupAllReduce: {Bandwidth: 0.9e9, Latency: 400 * time.Microsecond},
		Redistribution: exchange,
		StageSendRecv:  exchange,
	}
	m = m.ShareCores(cores, devices, threads)
	if devices*max(threads, 1) > cores {
		m.FLOPS *= oversubscribedCompute
	}
	return m
}

// oversubscribedCompute is what more compute threads than cores keep of a
// linear share of the cores' FLOP/s (see LocalMachine).
const oversubscribedCompute = 0.86

// ExchangeSeconds is the time of a redistribution (Exchange) in which the
// busiest rank receives bytes bytes: bytes over the bandwidth plus one
// latency, of the link between servers when acrossServers. Nothing
// received costs nothing.
func (m Machine) ExchangeSeconds(bytes int64, acrossServers bool) float64 {
	if bytes <= 0 {
		return 0
	}
	l := m.link(Redistribution, acrossServers)
	return float64(bytes)/l.Bandwidth + l.Latency.Seconds()
}
