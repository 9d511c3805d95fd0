package train

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/parallel/auto"
	"github.com/mspipe/mspipe/npu/shard"
)

// wholeModels are the models npu/trainer builds whole (stand_alone and
// data_parallel without the sharding engine).
var wholeModels = []string{"resnet20", "resnet50", "cnn"}

// usesEngine reports whether the job runs on the operator-parallel engine
// (npu/shard): every split mode, and the models only the engine builds.
func usesEngine(w With) bool {
	return w.Mode.Sharded() || !slices.Contains(wholeModels, w.Model)
}

// globalBatch is the batch of one step over the whole job.
func globalBatch(w With, devices int) int {
	if w.Mode.OneDevice() {
		return w.BatchSize
	}
	return w.BatchSize * devices
}

// planned is how a split job lays out its network: the strategy the ranks
// run (the user's, or auto_parallel's search result) and, for
// auto_parallel, the cost model's plan.
type planned struct {
	Strategy parallel.Strategy
	Auto     *auto.Plan
}

// planParallel checks the job's strategy against its model's graph on
// devices devices, or searches one (auto_parallel), before any rank
// process starts. Problems point into `with`.
func planParallel(w With, devices int, memory int64) (*planned, error) {
	if !usesEngine(w) {
		return &planned{}, nil
	}
	g, err := shard.GraphOf(w.Model, globalBatch(w, devices))
	if err != nil {
		return nil, withError("/model", err)
	}
	switch w.Mode {
	case parallel.SemiAutoParallel:
		if _, err := g.Shard(parallel.Strategy(w.Strategy), devices); err != nil {
			return nil, withError("/strategy", err)
		}
		return &planned{Strategy: parallel.Strategy(w.Strategy)}, nil
	case parallel.AutoParallel:
		m := Machine(devices, memory)
		plan, err := auto.Search(g, devices, m)
		if err != nil {
			return nil, withError("/mode", err)
		}
		return &planned{Strategy: plan.Strategy, Auto: plan}, nil
	}
	return &planned{}, nil
}

// costedStrategy is the strategy the cost model prices for a job: the one
// its ranks run, or a hybrid model's own.
func costedStrategy(w With, p *planned, devices int) parallel.Strategy {
	if w.Mode == parallel.HybridParallel {
		if s, ok := shard.Declared(w.Model, globalBatch(w, devices), devices); ok {
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

// withError is an error about one field of `with`, given as a JSON pointer.
type fieldError struct {
	Path string
	Err  error
}

func (e *fieldError) Error() string {
	return fmt.Sprintf("with.%s: %v", strings.TrimPrefix(e.Path, "/"), e.Err)
}
func (e *fieldError) Unwrap() error { return e.Err }

func withError(path string, err error) error { return &fieldError{Path: path, Err: err} }

// PlanText describes how a job of the stage would lay out its network on
// devices devices without starting anything: the strategy per operator
// and, for auto_parallel, the predicted step time and memory per rank.
// It writes nothing for modes that do not split the network.
func PlanText(out io.Writer, w With, devices int) error {
	w = withDefaults(w)
	if !w.Mode.Sharded() {
		return nil
	}
	memory, err := parseMemory(w.DeviceMemory)
	if err != nil {
		return err
	}
	p, err := planParallel(w, devices, memory)
	if err != nil {
		return err
	}
	g, err := shard.GraphOf(w.Model, globalBatch(w, devices))
	if err != nil {
		return err
	}
	plan := p.Auto
	if plan == nil {
		// The cost of the given (or the model's own) strategy, by the same
		// model auto_parallel searches with.
		if plan, err = auto.Evaluate(g, costedStrategy(w, p, devices), devices, Machine(devices, memory)); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%s in %s on %d devices, global batch %d:\n", w.Model, w.Mode, devices, globalBatch(w, devices))
	return plan.Format(out)
}

// withDefaults fills the fields a `with` block left out from defaults(),
// as the SDK does before Execute.
func withDefaults(w With) With {
	d := defaults()
	if w.Model == "" {
		w.Model = d.Model
	}
	if w.BatchSize == 0 {
		w.BatchSize = d.BatchSize
	}
	return w
}

// strategyFile builds the strategy file of a split network from the
// layouts its engine runs: every operator's strategy and every
// parameter's layout.
func strategyFile(ops []*parallel.OpLayout, params map[string]parallel.Layout) *parallel.StrategyFile {
	f := &parallel.StrategyFile{Stage: 0, Operators: map[string][][]int{}, Layouts: map[string]parallel.TensorLayout{}}
	for _, ol := range ops {
		if ol != nil {
			f.Operators[ol.Op] = ol.Strategy
		}
	}
	for name, l := range params {
		f.Layouts[name] = parallel.TensorLayoutOf(l)
	}
	return f
}

// strategyFormat picks the strategy file's encoding from its name: JSON
// for .json, MindSpore's protobuf otherwise.
func strategyFormat(path string) parallel.StrategyFormat {
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return parallel.FormatJSON
	}
	return parallel.FormatProto
}
