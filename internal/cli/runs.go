package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/spf13/cobra"
)

func newRunsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List earlier runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store := &pipeline.Store{Dir: runsDir(cmd)}
			runs, errs := store.List()
			for _, err := range errs {
				fmt.Fprintf(cmd.ErrOrStderr(), "mspipe: %v\n", err)
			}
			if len(runs) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no runs in %s\n", store.Dir)
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tPIPELINE\tSTATUS\tSTARTED\tDURATION\tSTAGES")
			for _, r := range runs {
				d := "-"
				if r.Finished != nil {
					d = r.Finished.Sub(r.Created).Round(time.Millisecond).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Pipeline, r.Status,
					r.Created.Local().Format("2006-01-02 15:04:05"), d, stageSummary(r))
			}
			return tw.Flush()
		},
	}
	addRunsDirFlag(cmd)
	return cmd
}

func stageSummary(r *pipeline.RunState) string {
	counts := map[pipeline.Status]int{}
	for _, s := range r.Stages {
		counts[s.Status]++
	}
	var parts []string
	for _, s := range []pipeline.Status{pipeline.StatusSucceeded, pipeline.StatusCached, pipeline.StatusSkipped, pipeline.StatusFailed, pipeline.StatusCancelled, pipeline.StatusRunning, pipeline.StatusPending} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	return strings.Join(parts, ", ")
}
