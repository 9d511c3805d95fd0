package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/mspipe/mspipe/cmd/mspipe/internal/report"
	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/spf13/cobra"
)

func newReportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report [RUN]",
		Short: "Write a run's report: one self-contained HTML file",
		Long: `Write the report of a run as one HTML file with everything inline (CSS and
SVG, no scripts, nothing fetched): the stage graph with each stage's state,
a timeline, loss curves per stage and rank, per-rank peak device memory,
the stages' results, the sharding strategy of each training stage and the
tensor manifests (shape, dtype, SHA-256) of integrate and reshard stages.
RUN is a run id or "latest" (the default). The file is runs/<id>/report.html
unless -o names another; its path is printed.`,
		Example: `  mspipe report
  mspipe report 20261123-054012-a1b2c3 -o report.html`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, dir, st, err := openRun(cmd, args)
			if err != nil {
				return err
			}
			r, err := report.Load(cmd.Context(), store.Dir, dir, st)
			if err != nil {
				return fmt.Errorf("run %s: %w", st.ID, err)
			}
			path := out
			if path == "" {
				path = filepath.Join(dir, "report.html")
			}
			now := time.Now()
			if err := atomicfile.Write(path, 0o644, func(w io.Writer) error { return report.Write(w, r, now) }); err != nil {
				return usageErr(fmt.Errorf("write report: %w", err))
			}
			fmt.Fprintln(cmd.OutOrStdout(), path)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write (default: report.html in the run's directory)")
	addRunsDirFlag(cmd)
	return cmd
}
