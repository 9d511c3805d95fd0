package train

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/plugins"
)

// check checks each field on its own, at validation and before a run.
func check(w With) []plugins.Problem {
	var out []plugins.Problem
	if _, err := job.ParseDeviceMemory(w.DeviceMemory); err != nil {
		out = append(out, plugins.Problem{Path: "/device_memory", Message: err.Error()})
	}
	out = append(out, launcherProblems(w)...)
	return append(out, checkSaveFile(w)...)
}

// checkCluster checks what depends on several fields or on the cluster:
// options that do not fit the mode, and a strategy against the model's
// operators on the stage's device count (before any rank starts: at
// validation, or when the run begins). Rules over a field known only at
// run time are left for then.
func checkCluster(w With, cluster plugins.Cluster, unknown []string) []plugins.Problem {
	known := func(keys ...string) bool {
		for _, k := range keys {
			if slices.Contains(unknown, k) {
				return false
			}
		}
		return true
	}
	var out []plugins.Problem
	if known("mode", "strategy") && len(w.Strategy) > 0 {
		if err := w.Mode.CheckStrategy(false); err != nil {
			out = append(out, plugins.Problem{Path: "/strategy", Message: err.Error()})
		}
	}
	if known("mode", "full_batch") && w.FullBatch && !w.Mode.Sharded() {
		out = append(out, plugins.Problem{Path: "/full_batch", Message: fmt.Sprintf("full_batch is for the modes that split the network (semi_auto_parallel, auto_parallel, hybrid_parallel), not %s", w.Mode)})
	}
	if known("fault") && w.Fault != nil && w.Fault.Shrink == 0 && cluster.Devices >= 1 {
		if err := w.Fault.Check(cluster.Devices); err != nil {
			out = append(out, plugins.Problem{Path: "/fault", Message: err.Error()})
		}
	}
	out = append(out, elasticProblems(w, cluster, known)...)
	out = append(out, optimizerProblems(w, cluster, known)...)
	if known("mode", "full_batch", "dataset_strategy") {
		out = append(out, datasetProblems(w, cluster.Devices)...)
	}
	if known("mode", "model") {
		if err := shard.CheckModelMode(w.Model, w.Mode); err != nil {
			out = append(out, plugins.Problem{Path: "/model", Message: err.Error()})
		}
	}
	if known("mode", "model", "pipeline_stages", "micro_size", "pipeline_schedule", "pipeline_stage", "batch_size",
		"grad_accumulation_step", "parallel_optimizer", "dataset_strategy") {
		out = append(out, pipelineProblems(w, cluster.Devices)...)
	}
	if len(out) > 0 || cluster.Devices < 1 || !known("mode", "model", "strategy", "batch_size", "full_batch", "dataset_strategy", "pipeline_stages", "micro_size") || w.Mode != parallel.SemiAutoParallel {
		return out
	}
	return strategyProblems(w, cluster.Devices)
}

// pipelineProblems checks the pipeline options: what needs stages, the
// mode, the device count and the micro-batch count against the batch,
// and the stage assignment against the model's operators. devices < 1
// when the cluster is not known yet.
func pipelineProblems(w With, devices int) []plugins.Problem {
	k := w.PipelineStages
	if k <= 1 {
		var out []plugins.Problem
		for _, f := range []struct {
			key string
			set bool
		}{{"micro_size", w.MicroSize > 1}, {"pipeline_schedule", w.PipelineSchedule != ""}, {"pipeline_stage", len(w.PipelineStage) > 0}} {
			if f.set {
				out = append(out, plugins.Problem{Path: "/" + f.key, Message: f.key + " is for pipeline parallel: set pipeline_stages to 2 or more"})
			}
		}
		return out
	}
	if w.Mode != parallel.SemiAutoParallel && w.Mode != parallel.AutoParallel {
		return []plugins.Problem{{Path: "/pipeline_stages", Message: fmt.Sprintf("pipeline_stages is for modes semi_auto_parallel and auto_parallel (a strategy-free semi_auto_parallel stage runs data parallel), not %s", w.Mode)}}
	}
	var out []plugins.Problem
	if w.DatasetStrategy.Splits != nil {
		out = append(out, plugins.Problem{Path: "/dataset_strategy", Message: "a dataset_strategy tuple with pipeline_stages is not supported yet"})
	}
	if w.ParallelOptimizer {
		// Not tried together yet: the optimizer's shards would live in each
		// stage group.
		out = append(out, plugins.Problem{Path: "/parallel_optimizer", Message: "parallel_optimizer with pipeline_stages is not supported yet"})
	}
	if w.GradAccumulation > 1 {
		out = append(out, plugins.Problem{Path: "/grad_accumulation_step", Message: "with pipeline_stages, micro_size splits each step into micro-batches: leave grad_accumulation_step out"})
	}
	if _, err := shard.PipelineStages(w.Model, k, w.PipelineStage); err != nil {
		at := "/pipeline_stages"
		if len(w.PipelineStage) > 0 {
			at = "/pipeline_stage"
		}
		out = append(out, plugins.Problem{Path: at, Message: err.Error()})
	}
	if devices < 1 {
		return out
	}
	if devices%k != 0 {
		return append(out, plugins.Problem{Path: "/pipeline_stages", Message: fmt.Sprintf("%d pipeline stages do not split %d devices into equal stage groups", k, devices)})
	}
	micro := max(w.MicroSize, 1)
	if batch := w.BatchSize * devices / k; batch%micro != 0 {
		out = append(out, plugins.Problem{Path: "/micro_size", Message: fmt.Sprintf("micro_size %d does not divide the global batch of %d (batch_size %d × %d devices per stage)", micro, batch, w.BatchSize, devices/k)})
	}
	return out
}

// optimizerProblems checks the parallel optimizer's options: the modes
// it runs in, a shard size only with it, and a shard size that divides the
// device count (each parameter's data-parallel group is a divisor of it;
// a group the size does not divide fails when the network is laid out,
// naming the parameter).
func optimizerProblems(w With, cluster plugins.Cluster, known func(...string) bool) []plugins.Problem {
	var out []plugins.Problem
	if known("mode", "parallel_optimizer") && w.ParallelOptimizer {
		switch w.Mode {
		case parallel.StandAlone, parallel.HybridParallel:
			out = append(out, plugins.Problem{Path: "/parallel_optimizer", Message: fmt.Sprintf("parallel_optimizer splits the update over data-parallel ranks: it is for data_parallel, semi_auto_parallel and auto_parallel, not %s", w.Mode)})
		}
	}
	if !known("parallel_optimizer", "optimizer_weight_shard_size") || w.OptimizerShardSize == 0 {
		return out
	}
	switch {
	case !w.ParallelOptimizer:
		out = append(out, plugins.Problem{Path: "/optimizer_weight_shard_size", Message: "optimizer_weight_shard_size needs parallel_optimizer: true"})
	case cluster.Devices > 0 && cluster.Devices%w.OptimizerShardSize != 0:
		out = append(out, plugins.Problem{Path: "/optimizer_weight_shard_size", Message: fmt.Sprintf("optimizer_weight_shard_size %d does not divide the stage's %d devices (it splits each parameter over that many of its data-parallel ranks)", w.OptimizerShardSize, cluster.Devices)})
	}
	return out
}

// datasetProblems checks dataset_strategy: the modes that take it, its
// conflicts with full_batch (MindSpore's), and the tuple form against the
// images and labels on devices devices (not checked when 0).
func datasetProblems(w With, devices int) []plugins.Problem {
	d := w.DatasetStrategy
	if !d.IsSet() {
		return nil
	}
	at := func(err error) []plugins.Problem {
		return []plugins.Problem{{Path: "/dataset_strategy", Message: err.Error()}}
	}
	switch {
	case d.Name == parallel.DatasetFullBatch && !w.Mode.Sharded():
		return at(fmt.Errorf("dataset_strategy full_batch is for the modes that split the network (semi_auto_parallel, auto_parallel, hybrid_parallel), not %s", w.Mode))
	case d.Sliced() && w.Mode != parallel.SemiAutoParallel && w.Mode != parallel.AutoParallel:
		return at(fmt.Errorf("%w: the tuple form is for semi_auto_parallel and auto_parallel, not %s", parallel.ErrDatasetStrategy, w.Mode))
	}
	if err := d.CheckWith(w.FullBatch); err != nil {
		return at(err)
	}
	if !d.Sliced() {
		return nil
	}
	if devices < 1 {
		devices = 0
	}
	if err := shard.CheckDatasetStrategy(d.Splits, devices); err != nil {
		return at(err)
	}
	return nil
}

// strategyProblems checks a semi_auto_parallel strategy on devices
// devices: each operator's entry on its own (at /strategy/<operator>),
// then the whole (shared parameters laid out one way).
func strategyProblems(w With, devices int) []plugins.Problem {
	l := job.Layout{Mode: w.Mode, BatchSize: w.BatchSize, Devices: devices, DatasetStrategy: w.DatasetStrategy.Splits}
	batch := l.GlobalBatch()
	if w.PipelineStages > 1 {
		// Each stage lays its operators out over its group, for one
		// micro-batch.
		devices /= w.PipelineStages
		batch = w.BatchSize * devices / max(w.MicroSize, 1)
		l.Devices = devices
	}
	g, err := shard.GraphOf(w.Model, batch)
	if err != nil {
		return []plugins.Problem{{Path: "/model", Message: err.Error()}}
	}
	var out []plugins.Problem
	for _, name := range slices.Sorted(maps.Keys(w.Strategy)) {
		at := "/strategy/" + pointerToken(name)
		op, ok := g.Op(name)
		if !ok {
			out = append(out, plugins.Problem{Path: at, Message: fmt.Sprintf("%v: %s has no operator %q (operators: %s)", parallel.ErrStrategy, g.Model, name, strings.Join(g.OpNames(), ", "))})
			continue
		}
		if _, err := op.Shard(w.Strategy[name], devices); err != nil {
			out = append(out, plugins.Problem{Path: at, Message: err.Error()})
		}
	}
	if len(out) > 0 {
		return out
	}
	if _, err := g.Shard(shard.FollowDataset(g, w.Strategy, w.DatasetStrategy.Splits, devices, false), devices); err != nil {
		out = append(out, plugins.Problem{Path: "/strategy", Message: err.Error()})
	}
	return out
}

// pointerToken escapes a key for a JSON pointer (RFC 6901).
func pointerToken(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// checkData refuses a data directory that is not an absolute path to a
// directory, when the run starts.
func checkData(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("data %q: give an absolute path (usually ${{ stages.prepare.outputs.dir }})", dir)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("data %s: not a directory", dir)
	}
	return nil
}

// elasticProblems refuses on_failure: shrink where it cannot work, and
// faults that do not fit the stage's jobs: the modes and options whose
// checkpoints are not resharded to a smaller job yet, and the launchers
// that start ranks on other servers.
func elasticProblems(w With, cluster plugins.Cluster, known func(keys ...string) bool) []plugins.Problem {
	var out []plugins.Problem
	if known("fault", "faults") && w.Fault != nil && len(w.Faults) > 0 {
		out = append(out, plugins.Problem{Path: "/faults", Message: "give fault or faults, not both"})
	}
	if known("faults", "fault") {
		seen := map[int]bool{}
		for i, f := range w.Faults {
			if seen[f.Shrink] {
				out = append(out, plugins.Problem{Path: fmt.Sprintf("/faults/%d", i), Message: fmt.Sprintf("a second fault in job %d of the stage: give each fault its own shrink", f.Shrink)})
			}
			seen[f.Shrink] = true
			// A later job's ranks are known once it starts: only the kind
			// and the step are checked here.
			devices := f.Rank + 1
			if f.Shrink == 0 && cluster.Devices >= 1 {
				devices = cluster.Devices
			}
			if err := f.Check(devices); err != nil {
				out = append(out, plugins.Problem{Path: fmt.Sprintf("/faults/%d", i), Message: err.Error()})
			}
		}
	}
	if !known("on_failure", "max_shrinks") {
		return out
	}
	if w.OnFailure != onFailureShrink {
		if w.MaxShrinks != nil {
			out = append(out, plugins.Problem{Path: "/max_shrinks", Message: "max_shrinks is for on_failure: shrink"})
		}
		if known("fault", "faults") {
			for i, f := range append(w.Faults, derefFault(w.Fault)...) {
				if f.Shrink > 0 {
					at := "/fault"
					if i < len(w.Faults) {
						at = fmt.Sprintf("/faults/%d", i)
					}
					out = append(out, plugins.Problem{Path: at, Message: fmt.Sprintf("a fault in job %d of the stage (shrink: %d) needs on_failure: shrink", f.Shrink, f.Shrink)})
				}
			}
		}
		return out
	}
	refuse := func(why string) {
		out = append(out, plugins.Problem{Path: "/on_failure", Message: "on_failure: shrink " + why + " (see docs/parallel-modes.md#elastic-training)"})
	}
	if known("launcher") && w.Launcher != launch.Local {
		refuse(fmt.Sprintf("runs with the local launcher only, not %s: mpirun and srun place ranks on several servers", w.Launcher))
	}
	if known("mode") && w.Mode != parallel.DataParallel && w.Mode != parallel.SemiAutoParallel && w.Mode != parallel.AutoParallel && w.Mode != parallel.HybridParallel {
		refuse(fmt.Sprintf("is for the modes of several devices (data_parallel, semi_auto_parallel, auto_parallel, hybrid_parallel), not %s", w.Mode))
	}
	if known("pipeline_stages") && w.PipelineStages > 1 && cluster.Devices >= 1 && cluster.Devices <= w.PipelineStages {
		// A shrink keeps the stages: n must be a multiple of K below the
		// devices (job.ShrinkTo says why a larger count is passed over).
		refuse(fmt.Sprintf("keeps the %d pipeline stages, and no smaller job of %d devices can: each stage already runs on one device", w.PipelineStages, cluster.Devices))
	}
	if known("dataset_strategy") && w.DatasetStrategy.Splits != nil {
		refuse("with a dataset_strategy tuple is not done yet")
	}
	return out
}

func derefFault(f *job.Fault) []job.Fault {
	if f == nil {
		return nil
	}
	return []job.Fault{*f}
}
