package job

import (
	"runtime"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/parallel/auto"
)

// A run plans on the local machine with its devices' threads: by default
// the cores divided among the devices, as the trainer gives them.
func TestMachineFor(t *testing.T) {
	cores := runtime.NumCPU()
	for _, tc := range []struct{ devices, threads, want int }{
		{1, 0, max(cores, 1)}, {8, 0, max(cores/8, 1)}, {8, 1, 1}, {1, 3, 3}, {2, 1, 1},
	} {
		m := MachineFor(tc.devices, tc.threads, 0)
		if want := auto.LocalMachine(cores, tc.devices, tc.want); m != want {
			t.Errorf("%d devices of %d threads: %+v, want LocalMachine(%d, %d, %d)", tc.devices, tc.threads, m, cores, tc.devices, tc.want)
		}
	}
	if m := MachineFor(8, 1, 1<<30); m.Memory != 1<<30 {
		t.Errorf("memory %d, want the given 1 GiB", m.Memory)
	}
	if Machine(8, 0) != MachineFor(8, 0, 0) {
		t.Error("Machine differs from MachineFor with the default threads")
	}
	// The layout's threads reach the plan's machine.
	l := Layout{Model: "wide_net", Mode: parallel.SemiAutoParallel, BatchSize: 4, Devices: 1, Threads: 2}
	if got, want := l.machine().FLOPS, auto.LocalMachine(cores, 1, 2).FLOPS; got != want {
		t.Errorf("a layout of 2 threads plans at %v FLOP/s, want %v", got, want)
	}
}
