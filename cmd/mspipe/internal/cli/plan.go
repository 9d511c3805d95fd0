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
predicted step time and peak memory. No rank process starts.`,
		Example: `  mspipe plan examples/two-stage-training.yaml -p epochs=4`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
			planParallel(w, ls.p)
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "set a param: -p name=value (repeatable)")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "plan as if the cache were empty")
	addRunsDirFlag(cmd)
	return cmd
}
