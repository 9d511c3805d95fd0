package shard

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/parallel"
)

// JobLayout is how a job lays its network out over its devices: every
// operator's layout and every parameter's whole-tensor layout, by name;
// with the parallel optimizer, the strategy file entry of every parameter
// whose update it splits. For one stage of a pipeline job (Stage), the
// stage's operators and parameters only, over the stage's devices.
type JobLayout struct {
	Stage  int                  // the pipeline stage laid out (0 without stages)
	Ops    []*parallel.OpLayout // nil for the operators of other stages
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
// BatchPerDevice, FullBatch, Classes, ParallelOptimizer,
// OptimizerShardSize and, for one stage of a pipeline job, Pipeline's
// Stages, Stage, Micro and Assign (Devices and BatchPerDevice then those
// of the stage's group, as a pipeline rank's New takes them; see
// PipelineLayoutOf).
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
	if err := cfg.checkStageLayout(); err != nil {
		return nil, err
	}
	if cfg.Classes == 0 {
		cfg.Classes = DefaultClasses
	}
	def, _, ops, err := cfg.lay()
	if err != nil {
		return nil, err
	}
	span, err := cfg.stageSpan(def)
	if err != nil {
		return nil, err
	}
	if cfg.Pipeline.on() {
		ops = stageOps(ops, span)
	}
	l := &JobLayout{Ops: ops, Params: map[string]parallel.Layout{}, Optimizer: map[string]parallel.TensorLayout{}}
	if cfg.Pipeline.on() {
		l.Stage = cfg.Pipeline.Stage
	}
	for i, o := range def.ops {
		if i < span.Lo || i >= span.Hi {
			continue // another pipeline stage's
		}
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
// writes it (strategy_ckpt_save_file; a pipeline stage's first rank its
// stage's, with current_stage), as Net.StrategyFile does.
func (l *JobLayout) StrategyFile() *parallel.StrategyFile {
	f := StrategyFileOf(l.Ops, l.Params, l.Optimizer)
	f.CurrentStage = l.Stage
	return f
}

// PipelineLayoutOf returns the layout of every stage of a pipeline job of
// cfg.Pipeline.Stages stages (LayoutOf of each; cfg.Pipeline.Stage is
// ignored): Devices and BatchPerDevice are those of one stage's group, as
// its ranks' New takes them.
func PipelineLayoutOf(cfg Config) ([]*JobLayout, error) {
	if !cfg.Pipeline.on() {
		return nil, fmt.Errorf("%w: %d pipeline stages, want 2 or more", ErrConfig, cfg.Pipeline.Stages)
	}
	out := make([]*JobLayout, cfg.Pipeline.Stages)
	for s := range out {
		c := cfg
		c.Pipeline.Stage = s
		l, err := LayoutOf(c)
		if err != nil {
			return nil, fmt.Errorf("pipeline stage %d: %w", s, err)
		}
		out[s] = l
	}
	return out, nil
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
