package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newPlanCmd() *cobra.Command {
	var params []string
	var noCache bool
	var machine string
	cmd := &cobra.Command{
		Use:   "plan FILE",
		Short: "Show what a run would do, without running anything",
		Long: `Show what mspipe run would do: the order of the stages, their inputs where
they are already known, which stages would come from the cache and which
would be skipped. No stage runs; inputs that depend on outputs of stages
that would run are shown as known only at run time. Plugin binaries are
started, as run starts them, to read their declaration and version (part
of the cache key), so plan is not for specs you do not trust: use validate.

For every npu/train stage in semi_auto_parallel, auto_parallel or
hybrid_parallel, plan also prints how the network would be split: each
operator's strategy with its predicted compute and communication time and
memory per rank (the cost model auto_parallel searches with), then the
predicted step time, peak memory and communication per link. No rank
process starts. A cluster given as a rank table is planned with the
table's device count and devices a server (when the table exists).

--machine chooses the machine the cost model prices:
  local      this computer's simulated devices, as a run plans (the
             default for a cluster of local devices)
  ascend910  a cluster of Ascend 910 servers from public figures (the
             default for a rank-table cluster); see docs/parallel-modes.md
  FILE       a machine file, YAML or JSON, every key required:
               flops: 256e12          # FLOP/s of one device
               memory: 32GiB          # one device's memory
               devices_per_server: 8  # a rank table's count overrides it
               intra_server: {bandwidth: 30e9, latency: 10us}  # bytes/s
               inter_server: {bandwidth: 12.5e9, latency: 30us}`,
		Example: `  mspipe plan examples/two-stage-training.yaml -p epochs=4
  mspipe plan cluster.yaml --machine ascend910
  mspipe plan cluster.yaml --machine my-cluster.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pm, err := loadPlanMachine(cmd.Context(), machine)
			if err != nil {
				return err
			}
			ls, err := loadSpec(cmd.ErrOrStderr(), args[0], params)
			if err != nil {
				return err
			}
			eng := newEngine(cmd, ls, 1, noCache)
			planned, err := eng.Plan(cmd.Context(), ls.p, ls.params)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "plan for %s (%d stages)\n", ls.p.Name, len(planned))
			for i, ps := range planned {
				needs := ""
				if len(ps.Needs) > 0 {
					needs = " after " + strings.Join(ps.Needs, ", ")
				}
				fmt.Fprintf(w, "%d. %s (%s)%s: %s — %s\n", i+1, ps.ID, ps.Uses, needs, ps.Action, ps.Detail)
				if ps.With != nil {
					b, _ := json.Marshal(ps.With)
					fmt.Fprintf(w, "   with %s\n", b)
				}
			}
			planParallel(w, ls.p, pm)
			planShrinks(w, ls.p)
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "set a param: -p name=value (repeatable)")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "plan as if the cache were empty")
	cmd.Flags().StringVar(&machine, "machine", "", "the machine split stages are planned for: local, ascend910 or a machine FILE (default: local for devices, ascend910 for a rank table)")
	addRunsDirFlag(cmd)
	return cmd
}
