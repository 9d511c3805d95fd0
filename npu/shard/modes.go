package shard

import (
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/parallel"
)

// CheckModelMode refuses to run a model that splits itself in a mode other
// than hybrid_parallel. It says nothing about models it does not know
// (GraphOf names those).
func CheckModelMode(model string, mode parallel.Mode) error {
	def, err := define(model, 1, DefaultClasses)
	if err != nil {
		return nil
	}
	return def.checkMode(mode)
}

// splitsItself reports whether the model declares its own split
// (layerwise_parallel parameters, an explicit AllReduce), as the seeds'
// HybridParallelNet does.
func (m *modelDef) splitsItself() bool {
	return m.declared != nil || slices.ContainsFunc(m.ops, func(o opDef) bool { return o.spec.Kind == parallel.OpAllReduce })
}

// checkMode is CheckModelMode for a defined model.
func (m *modelDef) checkMode(mode parallel.Mode) error {
	if m.splitsItself() && mode != parallel.HybridParallel {
		return fmt.Errorf("%s splits itself (layerwise_parallel parameters, an explicit AllReduce): it runs in mode %s, not %s", m.name, parallel.HybridParallel, mode)
	}
	return nil
}
