package job

import (
	"fmt"
	"io"
	"runtime"
	"slices"

	"github.com/mspipe/mspipe/internal/bytesize"
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
	// ParallelOptimizer and OptimizerShardSize are Config's: the cost
	// model then counts each rank's piece of the moments.
	ParallelOptimizer  bool
	OptimizerShardSize int
	// DatasetStrategy is dataset_strategy's tuple form (nil: unset).
	DatasetStrategy [][]int
	// Target is the machine to plan for (mspipe plan --machine); nil is
	// this computer's simulated devices ([Machine]), what a run plans
	// with. Memory, when set, overrides its device memory.
	Target *auto.Machine
}

// machine is the cost model's machine for the layout.
func (l Layout) machine() auto.Machine {
	if l.Target == nil {
		return Machine(l.Devices, l.Memory)
	}
	m := *l.Target
	if l.Memory > 0 {
		m.Memory = l.Memory
	}
	return m
}

// costOptions are the cost model's options for the layout.
func (l Layout) costOptions() []auto.Option {
	if !l.ParallelOptimizer {
		return nil
	}
	return []auto.Option{auto.ParallelOptimizer(l.OptimizerShardSize)}
}

// GlobalBatch is the layout's batch of one step over all devices: under a
// dataset_strategy tuple, the batch per device times its batch split.
func (l Layout) GlobalBatch() int {
	if l.DatasetStrategy != nil && len(l.DatasetStrategy[0]) > 0 {
		return l.BatchSize * l.DatasetStrategy[0][0]
	}
	return GlobalBatch(l.Mode, l.BatchSize, l.Devices)
}

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
	g, err := shard.GraphOf(l.Model, l.GlobalBatch())
	if err != nil {
		return nil, fieldError("model", err)
	}
	if l.DatasetStrategy != nil {
		if err := shard.CheckDatasetStrategy(l.DatasetStrategy, l.Devices); err != nil {
			return nil, fieldError("dataset_strategy", err)
		}
	}
	switch l.Mode {
	case parallel.SemiAutoParallel:
		if _, err := g.Shard(shard.FollowDataset(g, l.Strategy, l.DatasetStrategy, l.Devices, false), l.Devices); err != nil {
			return nil, fieldError("strategy", err)
		}
		return &Planned{Strategy: l.Strategy}, nil
	case parallel.AutoParallel:
		plan, err := auto.Search(g, l.Devices, l.machine(), l.costOptions()...)
		if err != nil {
			return nil, fieldError("mode", err)
		}
		// The leading operators take the images as the dataset strategy
		// cuts them (the search does not try H and W splits: its cost
		// model has no halo term).
		return &Planned{Strategy: shard.FollowDataset(g, plan.Strategy, l.DatasetStrategy, l.Devices, true), Auto: plan}, nil
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
	if !l.Mode.Sharded() && !l.ParallelOptimizer {
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
		if plan, err = auto.Evaluate(g, costedStrategy(l, p), l.Devices, l.machine(), l.costOptions()...); err != nil {
			return err
		}
	}
	opt := ""
	if l.ParallelOptimizer {
		opt = " with the parallel optimizer"
	}
	fmt.Fprintf(out, "%s in %s%s on %d devices, global batch %d:\n", l.Model, l.Mode, opt, l.Devices, l.GlobalBatch())
	if err := plan.Format(out); err != nil {
		return err
	}
	if l.DatasetStrategy != nil {
		// The cost model has no halo term: say what runs instead of
		// pricing it.
		followed := shard.FollowDataset(g, p.Strategy, l.DatasetStrategy, l.Devices, false)
		for _, name := range g.OpNames() {
			if st, ok := followed[name]; ok && fmt.Sprint(st) != fmt.Sprint(plan.Strategy[name]) {
				fmt.Fprintf(out, "dataset_strategy %v: %s runs %v on the images' pieces (halo exchange not priced above)\n", l.DatasetStrategy, name, st)
			}
		}
	}
	return nil
}

// ParseDeviceMemory reads the device_memory option as bytesize.Parse reads
// sizes ("32GiB", "1.5GiB", "512MiB"), from 1 MiB to 1024 TiB; "" means
// the default, 0.
func ParseDeviceMemory(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := bytesize.Parse(s)
	if err != nil || n < 1<<20 || n > 1<<50 {
		return 0, fmt.Errorf("device memory %q: want a size from 1MiB to 1024TiB, like 32GiB or 512MiB", s)
	}
	return n, nil
}
