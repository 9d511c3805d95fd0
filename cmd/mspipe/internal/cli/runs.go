package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/spf13/cobra"
)

func newRunsCmd() *cobra.Command {
	var output, status string
	var limit int
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List earlier runs, newest first",
		Long: `List earlier runs, newest first. A run whose mspipe process was killed
(run.json still says running, but no process holds the run's lock) is shown
as interrupted, as are the stages it was running; mspipe resume continues it.
--output json prints each run's state (run.json, with those statuses) as a
JSON array. --status keeps the runs with that status, --limit the newest N.`,
		Example: `  mspipe runs --limit 5
  mspipe runs --status failed -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageErr(fmt.Errorf("--output %q: want text or json", output))
			}
			if limit < 0 {
				return usageErr(fmt.Errorf("--limit %d: give a number of runs, 0 for all", limit))
			}
			if status != "" && !slices.Contains(runStatuses, pipeline.Status(status)) {
				return usageErr(fmt.Errorf("--status %q: want one of %s", status, joinStatuses(runStatuses)))
			}
			store := &pipeline.Store{Dir: runsDir(cmd)}
			runs, errs := store.List()
			for _, err := range errs {
				fmt.Fprintf(cmd.ErrOrStderr(), "mspipe: %v\n", err)
			}
			if status != "" {
				runs = slices.DeleteFunc(runs, func(r *pipeline.RunState) bool { return r.Status != pipeline.Status(status) })
			}
			if limit > 0 && len(runs) > limit {
				runs = runs[:limit] // newest first
			}
			if len(runs) == 0 && output == "text" {
				what := "runs"
				if status != "" {
					what = status + " runs"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "no %s in %s\n", what, store.Dir)
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
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many runs, newest first (0: all)")
	cmd.Flags().StringVar(&status, "status", "", "show only runs with this status ("+joinStatuses(runStatuses)+")")
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

// runStatuses are the statuses a run can have, as `runs` shows them.
var runStatuses = []pipeline.Status{pipeline.StatusRunning, pipeline.StatusSucceeded, pipeline.StatusFailed, pipeline.StatusCancelled, pipeline.StatusInterrupted}

func joinStatuses(ss []pipeline.Status) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}
