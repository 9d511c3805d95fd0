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

// Machine is what the cost model knows of the hardware: the speed of one
// device, the links between devices, and each device's memory.
type Machine struct {
	// FLOPS is the sustained float32 FLOP/s of one device.
	FLOPS float64
	// IntraServer is the link between devices of one server (shared
	// memory here, HCCS on an Ascend server); InterServer the link
	// between servers (TCP).
	IntraServer, InterServer Link
	// DevicesPerServer is how many consecutive ranks share a server.
	DevicesPerServer int
	// Memory is one device's memory in bytes.
	Memory int64
}

// DefaultMachine describes the simulated devices on the 2-core AMD EPYC
// development VM (AVX-512) the figures were measured on:
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
func DefaultMachine() Machine {
	return Machine{
		FLOPS:            115e9,
		IntraServer:      Link{Bandwidth: 10.8e9, Latency: 550 * time.Microsecond},
		InterServer:      Link{Bandwidth: 1.0e9, Latency: 3500 * time.Microsecond},
		DevicesPerServer: 8,
		Memory:           nn.Ascend910Memory,
	}
}

// ShareCores returns m with FLOPS scaled for devices rank processes that
// share cores CPU cores, as simulated devices on one small machine do: each
// gets cores/devices of a core when there are more devices than cores.
func (m Machine) ShareCores(cores, devices int) Machine {
	if cores > 0 && devices > cores {
		m.FLOPS *= float64(cores) / float64(devices)
	}
	return m
}

// Validate checks that every figure is positive.
func (m Machine) Validate() error {
	switch {
	case !(m.FLOPS > 0):
		return fmt.Errorf("%w: FLOP/s %v, want more than 0", ErrMachine, m.FLOPS)
	case !(m.IntraServer.Bandwidth > 0) || !(m.InterServer.Bandwidth > 0):
		return fmt.Errorf("%w: bandwidths %v (server) and %v (between servers) bytes/s, want more than 0", ErrMachine, m.IntraServer.Bandwidth, m.InterServer.Bandwidth)
	case m.IntraServer.Latency < 0 || m.InterServer.Latency < 0:
		return fmt.Errorf("%w: negative latency", ErrMachine)
	case m.DevicesPerServer < 1:
		return fmt.Errorf("%w: %d devices per server, want at least 1", ErrMachine, m.DevicesPerServer)
	case m.Memory < 1:
		return fmt.Errorf("%w: device memory %d bytes, want at least 1", ErrMachine, m.Memory)
	}
	return nil
}

// link returns the link a group of ranks uses: the slower one when the
// group spans servers.
func (m Machine) link(acrossServers bool) Link {
	if acrossServers {
		return m.InterServer
	}
	return m.IntraServer
}

// AllReduceSeconds is the time of a ring AllReduce of bytes bytes (each
// rank's buffer) among group ranks: 2(g−1)/g·bytes over the bandwidth,
// plus one latency. A group of one costs nothing.
func (m Machine) AllReduceSeconds(bytes int64, group int, acrossServers bool) float64 {
	if group <= 1 || bytes <= 0 {
		return 0
	}
	l := m.link(acrossServers)
	return 2*float64(group-1)/float64(group)*float64(bytes)/l.Bandwidth + l.Latency.Seconds()
}

// server returns the server of rank.
func (m Machine) server(rank int) int { return rank / m.DevicesPerServer }
