package shard

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/parallel"
)

// JobLayout is how a job lays its network out over its devices: every
// operator's layout and every parameter's whole-tensor layout, by name.
type JobLayout struct {
	Ops    []*parallel.OpLayout
	Params map[string]parallel.Layout
}

// LayoutOf returns the layout New gives cfg's network on every rank,
// computed by the same code without building the network (no device, no
// communicator): where each rank's checkpoint slices of a job of that
// model, mode, strategy and device count lie, so that a checkpoint can be
// resharded straight to them. It reads Model, Mode, Strategy, Devices,
// BatchPerDevice, FullBatch and Classes.
func LayoutOf(cfg Config) (*JobLayout, error) {
	switch {
	case cfg.Devices < 1:
		return nil, fmt.Errorf("%w: %d devices", ErrConfig, cfg.Devices)
	case cfg.BatchPerDevice < 1:
		return nil, fmt.Errorf("%w: batch per device %d, want at least 1", ErrConfig, cfg.BatchPerDevice)
	case cfg.Mode == parallel.StandAlone && cfg.Devices != 1:
		return nil, fmt.Errorf("%w: stand_alone runs on 1 device, not %d", ErrConfig, cfg.Devices)
	}
	if cfg.Classes == 0 {
		cfg.Classes = DefaultClasses
	}
	def, _, ops, err := cfg.lay()
	if err != nil {
		return nil, err
	}
	l := &JobLayout{Ops: ops, Params: map[string]parallel.Layout{}}
	for i, o := range def.ops {
		specs, layouts, _ := paramSpecs(o.spec, ops[i])
		for k, t := range specs {
			l.Params[t.Name] = layouts[k]
		}
	}
	return l, nil
}

// StrategyFile returns the strategy file of the layout, as a job writes it
// (strategy_ckpt_save_file): every operator's strategy and every
// parameter's layout.
func (l *JobLayout) StrategyFile() *parallel.StrategyFile {
	f := &parallel.StrategyFile{Operators: map[string][][]int{}, Layouts: map[string]parallel.TensorLayout{}}
	for _, ol := range l.Ops {
		if ol != nil {
			f.Operators[ol.Op] = ol.Strategy
		}
	}
	for name, pl := range l.Params {
		f.Layouts[name] = parallel.TensorLayoutOf(pl)
	}
	return f
}
