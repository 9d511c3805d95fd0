package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/mspipe/mspipe/spec"
	"github.com/mspipe/mspipe/stages/npu/train"
)

// parallelKeys are the `with` entries that decide how npu/train lays out
// its network.
var parallelKeys = []string{"mode", "model", "strategy", "batch_size", "full_batch", "device_memory"}

// planParallel prints, for every npu/train stage that splits its network,
// the strategy of each operator with the cost model's predicted step time
// and memory per rank, without starting any plugin or rank: auto_parallel's
// search runs here as it would in the stage.
func planParallel(w io.Writer, p *spec.Pipeline) {
	for _, s := range p.Stages {
		if s.Uses != train.Name || s.With == nil {
			continue
		}
		var raw map[string]any
		if err := s.With.Decode(&raw); err != nil {
			continue
		}
		if mode, _ := raw["mode"].(string); mode != "semi_auto_parallel" && mode != "auto_parallel" && mode != "hybrid_parallel" {
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
		var with train.With
		data, err := json.Marshal(static)
		if err == nil {
			err = json.Unmarshal(data, &with)
		}
		if err == nil {
			var b strings.Builder
			if err = train.PlanText(&b, with, devices); err == nil {
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
