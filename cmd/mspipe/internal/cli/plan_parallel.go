package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/internal/bytesize"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/parallel/auto"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/spec"
)

// machineLocal names the cost model of this computer's simulated devices.
const machineLocal = "local"

// planMachine is what `plan --machine` selects: "" for each cluster's
// default (local for devices, ascend910 for a rank table), "local", a
// preset's name, or a machine file, loaded once.
type planMachine struct {
	flag    string
	machine *auto.Machine // the preset or file; nil for local
}

func loadPlanMachine(ctx context.Context, flag string) (planMachine, error) {
	pm := planMachine{flag: flag}
	switch preset, ok := auto.Presets[flag]; {
	case flag == "" || flag == machineLocal:
	case ok:
		m := preset()
		pm.machine = &m
	default:
		m, err := auto.LoadMachine(ctx, flag)
		if err != nil {
			return planMachine{}, fmt.Errorf("--machine: %w", err)
		}
		pm.machine = &m
	}
	return pm, nil
}

// forCluster returns the machine to plan a cluster with, and its name for
// the output: a rank table describes a real cluster, so it defaults to the
// ascend910 preset with the table's devices a server.
func (pm planMachine) forCluster(rankTable bool, perServer int) (*auto.Machine, string) {
	name, m := pm.flag, pm.machine
	if name == "" {
		if !rankTable {
			return nil, machineLocal
		}
		preset := auto.Ascend910()
		name, m = "ascend910", &preset
	}
	if m == nil {
		return nil, machineLocal
	}
	c := *m
	if perServer > 0 {
		c.DevicesPerServer = perServer
	}
	return &c, name
}

// rankTableDevices reads the device count and the devices a server of a
// rank table (0 when the servers differ). A table that does not exist yet
// (an earlier stage writes it) or is invalid gives the reason it cannot
// be planned.
func rankTableDevices(path string) (devices, perServer int, why string) {
	t, problems, err := loadRankTable(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, 0, fmt.Sprintf("the rank table %s does not exist yet, the device count is known only at run time", path)
	case err != nil:
		return 0, 0, err.Error()
	case t == nil || problems.HasErrors():
		return 0, 0, fmt.Sprintf("the rank table %s is invalid (see mspipe ranktable validate %s)", path, path)
	}
	var sizes []int
	for _, s := range t.ServerList {
		sizes = append(sizes, len(s.Device))
	}
	if slices.Min(sizes) == slices.Max(sizes) {
		perServer = sizes[0]
	}
	return t.RankSize(), perServer, ""
}

// parallelKeys are the `with` entries that decide how npu/train lays out
// its network.
var parallelKeys = []string{"mode", "model", "strategy", "batch_size", "full_batch", "device_memory", "parallel_optimizer", "optimizer_weight_shard_size", "dataset_strategy",
	"pipeline_stages", "micro_size", "pipeline_schedule", "pipeline_stage", "threads"}

// planParallel prints, for every npu/train stage that splits its network,
// the strategy of each operator with the cost model's predicted step time
// and memory per rank, without starting any plugin or rank: auto_parallel's
// search runs here as it would in the stage, on the machine pm selects.
func planParallel(w io.Writer, p *spec.Pipeline, pm planMachine) {
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
		static := staticParallelInputs(w, raw)
		c := p.EffectiveCluster(s)
		devices, perServer := 1, 0
		switch {
		case c == nil:
		case c.RankTable != "":
			var why string
			if devices, perServer, why = rankTableDevices(p.Resolve(c.RankTable)); why != "" {
				fmt.Fprintf(w, "  %s: not planned\n", why)
				static = nil
			}
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
		target, name := pm.forCluster(c != nil && c.RankTable != "", perServer)
		layout.Target = target
		if err == nil {
			fmt.Fprintf(w, "  machine: %s\n", describeMachine(name, layout))
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
		Mode         parallel.Mode            `json:"mode"`
		Model        string                   `json:"model"`
		Strategy     parallel.Strategy        `json:"strategy"`
		BatchSize    int                      `json:"batch_size"`
		DeviceMemory string                   `json:"device_memory"`
		ParallelOpt  bool                     `json:"parallel_optimizer"`
		OptShardSize int                      `json:"optimizer_weight_shard_size"`
		Dataset      parallel.DatasetStrategy `json:"dataset_strategy"`
		Stages       int                      `json:"pipeline_stages"`
		Micro        int                      `json:"micro_size"`
		Schedule     string                   `json:"pipeline_schedule"`
		StageOf      map[string]int           `json:"pipeline_stage"`
		Threads      int                      `json:"threads"`
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
		BatchSize: with.BatchSize, Memory: memory, Devices: devices, Threads: with.Threads,
		PipelineStages: with.Stages, MicroSize: with.Micro, PipelineSchedule: with.Schedule, PipelineStage: with.StageOf,
		ParallelOptimizer: with.ParallelOpt, OptimizerShardSize: with.OptShardSize,
		DatasetStrategy: with.Dataset.Splits,
	}, nil
}

// describeMachine says which cost model a plan uses, with its figures for
// a described target.
func describeMachine(name string, l job.Layout) string {
	if l.Target == nil {
		return name + " (this computer's simulated devices, as a run plans; --machine ascend910 or a file sizes a real cluster)"
	}
	m := l.Target
	return fmt.Sprintf("%s (%.3g TFLOP/s and %s a device, %d devices a server; links %.3g GB/s and %s within a server, %.3g GB/s and %s between servers)",
		name, m.FLOPS/1e12, bytesize.Format(m.Memory), m.DevicesPerServer, m.IntraServer.Bandwidth/1e9, m.IntraServer.Latency, m.InterServer.Bandwidth/1e9, m.InterServer.Latency)
}

// planShrinks prints, for every npu/train stage with on_failure: shrink,
// the device count it continues on when one of its devices is lost, by
// the stage's own rule (job.ShrinkTo: the largest count HCCL allows on a
// server that divides the global batch and on which the stage's plan
// succeeds). The data is not read: the stage also keeps an epoch's number
// of steps, which plan cannot check.
func planShrinks(w io.Writer, p *spec.Pipeline) {
	for _, s := range p.Stages {
		if s.Uses != job.Stage || s.With == nil {
			continue
		}
		var raw map[string]any
		if err := s.With.Decode(&raw); err != nil || raw["on_failure"] != "shrink" {
			continue
		}
		fmt.Fprintf(w, "\non failure of %s (on_failure: shrink):\n", s.ID)
		static := staticParallelInputs(w, raw)
		c := p.EffectiveCluster(s)
		if static == nil {
			continue
		}
		if c == nil || c.RankTable != "" || c.DevicesExpr != nil || c.Devices < 2 {
			fmt.Fprintf(w, "  the device count is known only at run time, or the stage has one device: not planned\n")
			continue
		}
		l, err := planLayout(static, c.Devices)
		if err != nil {
			fmt.Fprintf(w, "  %v\n", err)
			continue
		}
		d := trainer.Defaults()
		l.Model, l.BatchSize = cmp.Or(l.Model, d.Model), cmp.Or(l.BatchSize, d.BatchSize)
		to, err := job.ShrinkTo(l, c.Devices-1, nil)
		if err != nil {
			fmt.Fprintf(w, "  one device lost: %v\n", err)
			continue
		}
		if k := l.PipelineStages; k > 1 {
			fmt.Fprintf(w, "  on failure: %d → %d devices, %d pipeline stages of %d (one device lost leaves %d; batch %d → %d per device, each stage's global batch %d kept)\n",
				c.Devices, to.Devices, k, to.Devices/k, c.Devices-1, l.BatchSize, to.BatchSize, l.GlobalBatch()/k)
			continue
		}
		fmt.Fprintf(w, "  on failure: %d → %d devices (one device lost leaves %d; batch %d → %d per device, the global batch %d kept)\n",
			c.Devices, to.Devices, c.Devices-1, l.BatchSize, to.BatchSize, l.GlobalBatch())
	}
}

// staticParallelInputs returns the inputs of raw that lay out the
// network (parallelKeys), or nil, after saying so on w, when one of them
// is an expression known only at run time.
func staticParallelInputs(w io.Writer, raw map[string]any) map[string]any {
	static := map[string]any{}
	for _, k := range parallelKeys {
		v, ok := raw[k]
		if !ok {
			continue
		}
		if str, isStr := v.(string); isStr && strings.Contains(str, "${{") {
			fmt.Fprintf(w, "  with.%s is known only at run time (%s): not planned\n", k, str)
			return nil
		}
		static[k] = v
	}
	return static
}
