package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/mspipe/mspipe/cmd/mspipe/internal/report"
	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/spf13/cobra"
)

func newReportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report [RUN...]",
		Short: "Write a run's report, or compare runs: one self-contained HTML file",
		Long: `Write the report of a run as one HTML file with everything inline (CSS and
SVG, no scripts, nothing fetched). It opens with the configuration of each
training stage (model, mode, strategy, devices, batch, learning rate) and
the results, then draws each training lineage (a stage and the stages that
continue from its checkpoints, such as train → reshard → retrain) on one
global-step axis: loss (ranks that reported the same losses drawn once),
held-out accuracy after each stage, learning rate and images per second.
Then come the stage graph, a timeline, the split tensors of each sharding
strategy and the tensor manifests of integrate and reshard stages. A
cached stage shows the curves of the run that trained it.

RUN is a run id or "latest" (the default). The file is runs/<id>/report.html
unless -o names another; its path is printed.

With two or more runs of the same pipeline, the page compares them: their
curves on shared axes, stage times and results side by side. The file is
then runs/<first id>/compare-<other ids>.html unless -o names another.`,
		Example: `  mspipe report
  mspipe report 20261123-054012-a1b2c3 -o report.html
  mspipe report 20261123-054012-a1b2c3 20261123-061530-d4e5f6`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"latest"}
			}
			var runs []*report.Run
			var dirs, ids []string
			for _, arg := range args {
				store, dir, st, err := openRun(cmd, []string{arg})
				if err != nil {
					return err
				}
				r, err := report.Load(cmd.Context(), store.Dir, dir, st)
				if err != nil {
					return fmt.Errorf("run %s: %w", st.ID, err)
				}
				runs = append(runs, r)
				dirs, ids = append(dirs, dir), append(ids, st.ID)
			}
			for _, r := range runs[1:] {
				if r.State.Pipeline != runs[0].State.Pipeline {
					return usageErr(fmt.Errorf("run %s is of pipeline %q and run %s of %q: only runs of one pipeline compare",
						ids[0], runs[0].State.Pipeline, r.State.ID, r.State.Pipeline))
				}
			}
			path := out
			switch {
			case path != "":
			case len(runs) == 1:
				path = filepath.Join(dirs[0], "report.html")
			default:
				path = filepath.Join(dirs[0], "compare-"+strings.Join(ids[1:], "-")+".html")
			}
			now := time.Now()
			if err := atomicfile.Write(path, 0o644, func(w io.Writer) error { return report.WriteCompare(w, runs, now) }); err != nil {
				return usageErr(fmt.Errorf("write report: %w", err))
			}
			fmt.Fprintln(cmd.OutOrStdout(), path)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write (default: report.html, or compare-<ids>.html, in the first run's directory)")
	addRunsDirFlag(cmd)
	return cmd
}
