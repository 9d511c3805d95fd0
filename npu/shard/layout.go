package shard

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/parallel"
)

// JobLayout is how a job lays its network out over its devices: every
// operator's layout and every parameter's whole-tensor layout, by name;
// with the parallel optimizer, the strategy file entry of every parameter
// whose update it splits.
type JobLayout struct {
	Ops    []*parallel.OpLayout
	Params map[string]parallel.Layout
	// Optimizer holds, by name, the parameters the parallel optimizer
	// splits (opt_weight_shard_step and opt_weight_shard_size set): each
	// rank checkpoints, and loads, only its piece of them and of their
	// moments. Empty without the optimizer.
	Optimizer map[string]parallel.TensorLayout
}

// LayoutOf returns the layout New gives cfg's network on every rank,
// computed by the same code without building the network (no device, no
// communicator): where each rank's checkpoint slices of a job of that
// model, mode, strategy and device count lie, so that a checkpoint can be
// resharded straight to them. It reads Model, Mode, Strategy, Devices,
// BatchPerDevice, FullBatch, Classes, ParallelOptimizer and
// OptimizerShardSize.
func LayoutOf(cfg Config) (*JobLayout, error) {
	switch {
	case cfg.Devices < 1:
		return nil, fmt.Errorf("%w: %d devices", ErrConfig, cfg.Devices)
	case cfg.BatchPerDevice < 1:
		return nil, fmt.Errorf("%w: batch per device %d, want at least 1", ErrConfig, cfg.BatchPerDevice)
	case cfg.Mode == parallel.StandAlone && cfg.Devices != 1:
		return nil, fmt.Errorf("%w: stand_alone runs on 1 device, not %d", ErrConfig, cfg.Devices)
	}
	if err := cfg.checkOptimizer(); err != nil {
		return nil, err
	}
	if cfg.Classes == 0 {
		cfg.Classes = DefaultClasses
	}
	def, _, ops, err := cfg.lay()
	if err != nil {
		return nil, err
	}
	l := &JobLayout{Ops: ops, Params: map[string]parallel.Layout{}, Optimizer: map[string]parallel.TensorLayout{}}
	for i, o := range def.ops {
		specs, layouts, _ := paramSpecs(o.spec, ops[i])
		for k, t := range specs {
			l.Params[t.Name] = layouts[k]
			// The split is the same on every rank: rank 0's says it.
			split, err := cfg.splitOptimizer(t, layouts[k], 0)
			if err != nil {
				return nil, fmt.Errorf("operator %s: %w", o.spec.Name, err)
			}
			if split != nil {
				l.Optimizer[t.Name] = split.layout
			}
		}
	}
	return l, nil
}

// StrategyFile returns the strategy file of the layout, as a job's rank 0
// writes it (strategy_ckpt_save_file).
func (l *JobLayout) StrategyFile() *parallel.StrategyFile {
	return StrategyFileOf(l.Ops, l.Params, l.Optimizer)
}

// StrategyFileOf builds the strategy file of a split network: every
// operator's strategy and every parameter's layout, the entry of optimizer
// for the parameters whose update the parallel optimizer splits. A job
// writes its network's (Net.OpLayouts, Layouts, OptimizerLayouts) and a
// reshard for a job LayoutOf's, by this one function.
func StrategyFileOf(ops []*parallel.OpLayout, params map[string]parallel.Layout, optimizer map[string]parallel.TensorLayout) *parallel.StrategyFile {
	f := &parallel.StrategyFile{Operators: map[string][][]int{}, Layouts: map[string]parallel.TensorLayout{}}
	for _, ol := range ops {
		if ol != nil {
			f.Operators[ol.Op] = ol.Strategy
		}
	}
	for name, pl := range params {
		f.Layouts[name] = parallel.TensorLayoutOf(pl)
		if tl, ok := optimizer[name]; ok {
			f.Layouts[name] = tl
		}
	}
	return f
}
