package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/spec"
)

// parallelKeys are the `with` entries that decide how npu/train lays out
// its network.
var parallelKeys = []string{"mode", "model", "strategy", "batch_size", "full_batch", "device_memory", "parallel_optimizer", "optimizer_weight_shard_size",
	"pipeline_stages", "micro_size", "pipeline_schedule", "pipeline_stage"}

// planParallel prints, for every npu/train stage that splits its network,
// the strategy of each operator with the cost model's predicted step time
// and memory per rank, without starting any plugin or rank: auto_parallel's
// search runs here as it would in the stage.
func planParallel(w io.Writer, p *spec.Pipeline) {
	for _, s := range p.Stages {
		if s.Uses != job.Stage || s.With == nil {
			continue
		}
		var raw map[string]any
		if err := s.With.Decode(&raw); err != nil {
			continue
		}
		// The parallel optimizer splits the update even in data_parallel.
		if mode, _ := raw["mode"].(string); !splitsNetwork(mode) && raw["parallel_optimizer"] != true {
			continue
		}
		fmt.Fprintf(w, "\nparallel plan of %s:\n", s.ID)
		static := map[string]any{}
		for _, k := range parallelKeys {
			v, ok := raw[k]
			if !ok {
				continue
			}
			if str, isStr := v.(string); isStr && strings.Contains(str, "${{") {
				fmt.Fprintf(w, "  with.%s is known only at run time (%s): not planned\n", k, str)
				static = nil
				break
			}
			static[k] = v
		}
		c := p.EffectiveCluster(s)
		devices := 1
		switch {
		case c == nil:
		case c.DevicesExpr != nil || c.Devices == 0:
			fmt.Fprintf(w, "  the device count is known only at run time: not planned\n")
			static = nil
		default:
			devices = c.Devices
		}
		if static == nil {
			continue
		}
		layout, err := planLayout(static, devices)
		if err == nil {
			var b strings.Builder
			if err = job.PlanText(&b, layout); err == nil {
				for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
					fmt.Fprintf(w, "  %s\n", line)
				}
			}
		}
		if err != nil {
			fmt.Fprintf(w, "  %v\n", err)
		}
	}
}

// splitsNetwork reports whether a `with.mode` value names a mode that
// splits the network across ranks.
func splitsNetwork(mode string) bool {
	m, err := parallel.ParseMode(mode)
	return err == nil && m.Sharded()
}

// planLayout reads the parallelKeys of an npu/train `with` block, all known
// before the run, as the stage would: a zero model or batch size is the
// trainer's default.
func planLayout(static map[string]any, devices int) (job.Layout, error) {
	var with struct {
		Mode         parallel.Mode     `json:"mode"`
		Model        string            `json:"model"`
		Strategy     parallel.Strategy `json:"strategy"`
		BatchSize    int               `json:"batch_size"`
		DeviceMemory string            `json:"device_memory"`
		Stages       int               `json:"pipeline_stages"`
		Micro        int               `json:"micro_size"`
		Schedule     string            `json:"pipeline_schedule"`
		StageOf      map[string]int    `json:"pipeline_stage"`
		ParallelOpt  bool              `json:"parallel_optimizer"`
		OptShardSize int               `json:"optimizer_weight_shard_size"`
	}
	data, err := json.Marshal(static)
	if err == nil {
		err = json.Unmarshal(data, &with)
	}
	if err != nil {
		return job.Layout{}, err
	}
	memory, err := job.ParseDeviceMemory(with.DeviceMemory)
	if err != nil {
		return job.Layout{}, err
	}
	return job.Layout{
		Model: with.Model, Mode: with.Mode, Strategy: with.Strategy,
		BatchSize: with.BatchSize, Memory: memory, Devices: devices,
		PipelineStages: with.Stages, MicroSize: with.Micro, PipelineSchedule: with.Schedule, PipelineStage: with.StageOf,
		ParallelOptimizer: with.ParallelOpt, OptimizerShardSize: with.OptShardSize,
	}, nil
}
