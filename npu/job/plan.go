package job

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"

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
	// Threads are compute threads per device (0: the trainer's default,
	// the cores divided among the devices): the local machine model gives
	// each device that many cores' worth, at most its share.
	Threads int
	// PipelineStages and MicroSize: the pipeline (0 or 1: none). The
	// strategy then lays each stage out over its Devices/PipelineStages
	// devices, for one micro-batch. PipelineStage is the user's operator
	// to stage map (nil: the balanced cut), PipelineSchedule "1f1b" or
	// "gpipe" ("": 1f1b).
	PipelineStages, MicroSize int
	PipelineStage             map[string]int
	PipelineSchedule          string
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
		return MachineFor(l.Devices, l.Threads, l.Memory)
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
	g, err := shard.GraphOf(l.Model, l.passBatch())
	if err != nil {
		return nil, fieldError("model", err)
	}
	devices := l.stageDevices()
	if l.DatasetStrategy != nil {
		if err := shard.CheckDatasetStrategy(l.DatasetStrategy, l.Devices); err != nil {
			return nil, fieldError("dataset_strategy", err)
		}
	}
	switch l.Mode {
	case parallel.SemiAutoParallel:
		if _, err := g.Shard(shard.FollowDataset(g, l.Strategy, l.DatasetStrategy, devices, false), devices); err != nil {
			return nil, fieldError("strategy", err)
		}
		return &Planned{Strategy: l.Strategy}, nil
	case parallel.AutoParallel:
		// With a pipeline, every stage's operators are searched over its
		// group, on the whole chain's graph of one micro-batch (each rank
		// builds only its stage's).
		plan, err := auto.Search(g, devices, l.machine(), l.costOptions()...)
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
// devices with the given memory (0: the default) on this computer, each
// rank with the trainer's default threads (the cores divided among the
// ranks): see [MachineFor].
func Machine(devices int, memory int64) auto.Machine {
	return MachineFor(devices, 0, memory)
}

// MachineFor is the cost model's machine for a job of devices simulated
// devices of threads compute threads each (0: the trainer's default) with
// the given memory (0: the default) on this computer: [auto.LocalMachine],
// the measured figures with the devices sharing the cores.
func MachineFor(devices, threads int, memory int64) auto.Machine {
	cores := runtime.NumCPU()
	if threads < 1 {
		threads = max(cores/max(devices, 1), 1)
	}
	m := auto.LocalMachine(cores, devices, threads)
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
	g, err := shard.GraphOf(l.Model, l.passBatch())
	if err != nil {
		return err
	}
	plan := p.Auto
	if plan == nil {
		// The cost of the given (or the model's own) strategy, by the same
		// model auto_parallel searches with.
		if plan, err = auto.Evaluate(g, costedStrategy(l, p), l.stageDevices(), l.machine(), l.costOptions()...); err != nil {
			return err
		}
	}
	if l.PipelineStages > 1 {
		return pipelineText(out, l, plan)
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

// pipelineText describes a pipeline job: the strategy of one micro-batch
// on a stage group, then each stage's operators, parameters and
// predicted memory, and the bubble the schedule leaves.
func pipelineText(out io.Writer, l Layout, plan *auto.Plan) error {
	k, m, per := l.PipelineStages, max(l.MicroSize, 1), l.stageDevices()
	sched, err := shard.ParseSchedule(l.PipelineSchedule)
	if err != nil {
		return fieldError("pipeline_schedule", err)
	}
	spans, err := shard.PipelineStages(l.Model, k, l.PipelineStage)
	if err != nil {
		return fieldError("pipeline_stage", err)
	}
	g, err := shard.GraphOf(l.Model, l.passBatch())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s in %s on %d devices: %d pipeline stages of %d devices, global batch %d in %d micro-batches of %d (%s)\n",
		l.Model, l.Mode, l.Devices, k, per, l.BatchSize*per, m, l.passBatch(), sched)
	fmt.Fprintf(out, "each stage group runs one micro-batch as:\n")
	if err := plan.Format(out); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\tranks\toperators\tparameters\tmemory per rank")
	for s, sp := range spans {
		var mem int64
		for _, c := range plan.Ops {
			if i := slices.IndexFunc(g.Ops[sp.Lo:sp.Hi], func(o parallel.OpSpec) bool { return o.Name == c.Op }); i >= 0 {
				mem += c.Memory
			}
		}
		// Plus the received input of every micro-batch, kept for the
		// backward's recomputation (a rank's share of it).
		if sp.Lo > 0 {
			elems := int64(1)
			for _, d := range g.Ops[sp.Lo].Inputs[0].Shape {
				elems *= int64(d)
			}
			mem += int64(m) * 4 * elems / int64(per)
		}
		fmt.Fprintf(tw, "%d\t%d-%d\t%s … %s (%d)\t%d\t%s\n", s, s*per, (s+1)*per-1, sp.First, sp.Last, sp.Hi-sp.Lo, sp.Params, bytesize.Format(mem))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "bubble: (K−1)/(M+K−1) = %d/%d = %.1f%% of a step idle on each stage, if the stages took equal time\n", k-1, m+k-1, 100*float64(k-1)/float64(m+k-1))
	return err
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
