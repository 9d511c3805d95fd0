package job

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/parallel/auto"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/trainer"
)

// wholeModels are the models npu/trainer builds whole (stand_alone and
// data_parallel without the sharding engine).
var wholeModels = []string{"resnet20", "resnet50", "cnn"}

// UsesEngine reports whether a job of model in mode runs on the
// operator-parallel engine (npu/shard): every split mode, and the models
// only the engine builds.
func UsesEngine(model string, mode parallel.Mode) bool {
	return mode.Sharded() || !slices.Contains(wholeModels, model)
}

// GlobalBatch is the batch of one step over a job of devices devices,
// batchPerDevice images each.
func GlobalBatch(mode parallel.Mode, batchPerDevice, devices int) int {
	if mode.OneDevice() {
		return batchPerDevice
	}
	return batchPerDevice * devices
}

// Layout is what decides how a job lays out its network: the npu/train
// options of the same names, and the job's device count.
type Layout struct {
	Model string
	Mode  parallel.Mode
	// Strategy is the user's (semi_auto_parallel only).
	Strategy  parallel.Strategy
	BatchSize int   // per device
	Memory    int64 // device capacity in bytes; 0: the cost model's default
	Devices   int
	// PipelineStages and MicroSize: the pipeline (0 or 1: none). The
	// strategy then lays each stage out over its Devices/PipelineStages
	// devices, for one micro-batch.
	PipelineStages, MicroSize int
}

// stageDevices is the devices one stage (the whole job without a
// pipeline) lays its operators out over.
func (l Layout) stageDevices() int {
	if l.PipelineStages > 1 {
		return l.Devices / l.PipelineStages
	}
	return l.Devices
}

// passBatch is the batch one pass of the network runs: the global batch,
// or a micro-batch of a stage group's.
func (l Layout) passBatch() int {
	if l.PipelineStages > 1 {
		return l.BatchSize * l.stageDevices() / max(l.MicroSize, 1)
	}
	return l.GlobalBatch()
}

// GlobalBatch is the layout's batch of one step over all devices.
func (l Layout) GlobalBatch() int { return GlobalBatch(l.Mode, l.BatchSize, l.Devices) }

// Planned is how a split job lays out its network: the strategy the ranks
// run (the user's, or auto_parallel's search result) and, for
// auto_parallel, the cost model's plan.
type Planned struct {
	Strategy parallel.Strategy
	Auto     *auto.Plan
}

// Plan checks the layout's strategy against its model's graph, or searches
// one (auto_parallel), before any rank process starts. A job off the
// engine has nothing to plan. Errors are FieldErrors naming the option at
// fault.
func Plan(l Layout) (*Planned, error) {
	if !UsesEngine(l.Model, l.Mode) {
		return &Planned{}, nil
	}
	g, err := shard.GraphOf(l.Model, l.passBatch())
	if err != nil {
		return nil, fieldError("model", err)
	}
	devices := l.stageDevices()
	switch l.Mode {
	case parallel.SemiAutoParallel:
		if _, err := g.Shard(l.Strategy, devices); err != nil {
			return nil, fieldError("strategy", err)
		}
		return &Planned{Strategy: l.Strategy}, nil
	case parallel.AutoParallel:
		// With a pipeline, every stage's operators are searched over its
		// group, on the whole chain's graph of one micro-batch (each rank
		// builds only its stage's).
		plan, err := auto.Search(g, devices, Machine(devices, l.Memory))
		if err != nil {
			return nil, fieldError("mode", err)
		}
		return &Planned{Strategy: plan.Strategy, Auto: plan}, nil
	}
	return &Planned{}, nil
}

// costedStrategy is the strategy the cost model prices for a job: the one
// its ranks run, or a hybrid model's own.
func costedStrategy(l Layout, p *Planned) parallel.Strategy {
	if l.Mode == parallel.HybridParallel {
		if s, ok := shard.Declared(l.Model, l.GlobalBatch(), l.Devices); ok {
			return s
		}
	}
	return p.Strategy
}

// Machine is the cost model's machine for a job of devices simulated
// devices with the given memory (0: the default) on this computer: the
// measured defaults, each device getting its share of the cores. The
// collectives of the split modes (redistribution, group AllReduce) travel
// over TCP in this build even within a server, so the link inside a
// server is priced as the TCP link.
func Machine(devices int, memory int64) auto.Machine {
	m := auto.DefaultMachine().ShareCores(runtime.NumCPU(), devices)
	m.IntraServer = m.InterServer
	if memory > 0 {
		m.Memory = memory
	}
	return m
}

// FieldError is an error about one option of the npu/train stage's `with`
// block, named by its key (Field, e.g. "strategy").
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("with.%s: %v", e.Field, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldError(field string, err error) error { return &FieldError{Field: field, Err: err} }

// PlanText describes how a job would lay out its network without starting
// anything: the strategy per operator and, for auto_parallel, the
// predicted step time and memory per rank. A zero Model or BatchSize is
// the trainer's default. It writes nothing for modes that do not split the
// network.
func PlanText(out io.Writer, l Layout) error {
	d := trainer.Defaults()
	if l.Model == "" {
		l.Model = d.Model
	}
	if l.BatchSize == 0 {
		l.BatchSize = d.BatchSize
	}
	if !l.Mode.Sharded() {
		return nil
	}
	p, err := Plan(l)
	if err != nil {
		return err
	}
	g, err := shard.GraphOf(l.Model, l.GlobalBatch())
	if err != nil {
		return err
	}
	plan := p.Auto
	if plan == nil {
		// The cost of the given (or the model's own) strategy, by the same
		// model auto_parallel searches with.
		if plan, err = auto.Evaluate(g, costedStrategy(l, p), l.Devices, Machine(l.Devices, l.Memory)); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%s in %s on %d devices, global batch %d:\n", l.Model, l.Mode, l.Devices, l.GlobalBatch())
	return plan.Format(out)
}

// ParseDeviceMemory reads the device_memory option: bytes, or a number
// with KiB, MiB, GiB or TiB ("32GiB", "1.5GiB"); "" means the default, 0.
func ParseDeviceMemory(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	num, mult := s, 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	n := v * mult
	if err != nil || n < 1<<20 || n > 1<<50 {
		return 0, fmt.Errorf("device memory %q: want a size from 1MiB to 1024TiB, like 32GiB or 512MiB", s)
	}
	return int64(n), nil
}
