package job

import (
	"fmt"
	"strings"

	"github.com/mspipe/mspipe/npu/ranktable"
)

// Shrunk is where an elastic job continues after losing devices: on
// Devices devices of BatchSize images each, so that a step's global batch
// is the lost job's.
type Shrunk struct {
	Devices   int
	BatchSize int // per device
	Planned   *Planned
}

// ShrinkTo returns where a job laid out as l continues when only
// survivors of its devices are left (npu/train's on_failure: shrink): the
// largest device count n ≤ survivors, below l.Devices, such that
//
//   - HCCL allows n devices on one server (1, 2, 4 or 8);
//   - with pipeline stages, n is a multiple of their number K, which is
//     kept: each stage goes on on n/K devices;
//   - the global batch divides into n equal per-device batches, kept as it
//     was so that a step, its learning rate and the epoch's steps stay the
//     lost job's;
//   - the job's own plan succeeds on n devices (Plan: for
//     semi_auto_parallel the user's strategy must fit n devices);
//   - accept, when not nil, takes it (npu/train checks that an epoch keeps
//     its number of steps on the data).
//
// The error says why every larger count was passed over.
func ShrinkTo(l Layout, survivors int, accept func(n, batch int) error) (Shrunk, error) {
	global := l.GlobalBatch()
	var passed []string
	for n := min(survivors, l.Devices-1); n >= 1; n-- {
		why := shrinkRefusal(l, n, global, accept)
		if why == "" {
			nl := l
			nl.Devices, nl.BatchSize = n, global/n
			p, err := Plan(nl)
			if err != nil {
				return Shrunk{}, err
			}
			return Shrunk{Devices: n, BatchSize: global / n, Planned: p}, nil
		}
		passed = append(passed, fmt.Sprintf("%d: %s", n, why))
	}
	if len(passed) == 0 {
		return Shrunk{}, fmt.Errorf("no device is left to continue on")
	}
	return Shrunk{}, fmt.Errorf("no smaller device count can continue the job (%s)", strings.Join(passed, "; "))
}

// shrinkRefusal says why a job of layout l cannot continue on n devices
// with its global batch global, or "".
func shrinkRefusal(l Layout, n, global int, accept func(n, batch int) error) string {
	if _, err := ranktable.Generate(ranktable.GenerateOptions{Devices: n, Scheme: ranktable.SchemeLocal}); err != nil {
		return "HCCL supports 1, 2, 4 or 8 devices on a server"
	}
	if k := l.PipelineStages; k > 1 && n%k != 0 {
		return fmt.Sprintf("%d devices do not split into the job's %d pipeline stages (a shrink keeps them)", n, k)
	}
	if global%n != 0 {
		return fmt.Sprintf("the global batch %d does not divide into %d equal batches", global, n)
	}
	nl := l
	nl.Devices, nl.BatchSize = n, global/n
	if _, err := Plan(nl); err != nil {
		return err.Error()
	}
	if accept != nil {
		if err := accept(n, global/n); err != nil {
			return err.Error()
		}
	}
	return ""
}
