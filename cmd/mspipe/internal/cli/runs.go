package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/spf13/cobra"
)

func newRunsCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List earlier runs, newest first",
		Long: `List earlier runs, newest first. A run whose mspipe process was killed
(run.json still says running, but no process holds the run's lock) is shown
as interrupted, as are the stages it was running; mspipe resume continues it.
--output json prints each run's state (run.json, with those statuses) as a
JSON array.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageErr(fmt.Errorf("--output %q: want text or json", output))
			}
			store := &pipeline.Store{Dir: runsDir(cmd)}
			runs, errs := store.List()
			for _, err := range errs {
				fmt.Fprintf(cmd.ErrOrStderr(), "mspipe: %v\n", err)
			}
			if len(runs) == 0 && output == "text" {
				fmt.Fprintf(cmd.ErrOrStderr(), "no runs in %s\n", store.Dir)
				return nil
			}
			if output == "json" {
				if runs == nil {
					runs = []*pipeline.RunState{} // [], not null
				}
				return printJSON(cmd.OutOrStdout(), runs)
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
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text (a table) or json")
	addRunsDirFlag(cmd)
	return cmd
}

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

func stageSummary(r *pipeline.RunState) string {
	counts := map[pipeline.Status]int{}
	for _, s := range r.Stages {
		counts[s.Status]++
	}
	var parts []string
	for _, s := range []pipeline.Status{pipeline.StatusSucceeded, pipeline.StatusCached, pipeline.StatusSkipped, pipeline.StatusFailed, pipeline.StatusCancelled, pipeline.StatusInterrupted, pipeline.StatusRunning, pipeline.StatusPending} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	return strings.Join(parts, ", ")
}
