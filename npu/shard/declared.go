package shard

import "github.com/mspipe/mspipe/npu/parallel"

// Declared returns the strategy a hybrid_parallel model sets itself on
// devices devices for a global batch of globalBatch (its layerwise_parallel
// split), and false for models that declare none.
func Declared(model string, globalBatch, devices int) (parallel.Strategy, bool) {
	def, err := define(model, globalBatch, DefaultClasses)
	if err != nil || def.declared == nil {
		return nil, false
	}
	return def.declared(devices), true
}
