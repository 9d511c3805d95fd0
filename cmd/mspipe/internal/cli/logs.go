package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/pipeline"
	"github.com/spf13/cobra"
)

func newLogsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logs [RUN [STAGE]]",
		Short: "Print the logs of a run or of one of its stages",
		Long: `Print stage logs of a run: every stage's log in order, or one stage's.
RUN is a run id or "latest" (the default). The stages of a run whose mspipe
was killed show as interrupted where run.json still says running.`,
		Example: `  mspipe logs
  mspipe logs latest train
  mspipe logs 20261123-054012-a1b2c3 prepare`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, dir, st, err := openRun(cmd, args)
			if err != nil {
				return err
			}
			id := st.ID
			w := cmd.OutOrStdout()
			if st.Status == pipeline.StatusInterrupted {
				fmt.Fprintf(cmd.ErrOrStderr(), "run %s is %s; mspipe resume %s continues it\n", id, st.Error, id)
			}
			if len(args) == 2 {
				ss, ok := st.Stages[args[1]]
				if !ok {
					return usageErr(fmt.Errorf("run %s has no stage %q (stages: %v)", id, args[1], st.Order))
				}
				if err := copyLog(cmd.Context(), w, dir, ss.Log); err != nil {
					if errors.Is(err, userfile.ErrOutside) || errors.Is(err, userfile.ErrNotRegular) {
						return fmt.Errorf("run %s, stage %s: %w", id, args[1], err)
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "stage %s of run %s has no log: it is %s (%s)\n", args[1], id, ss.Status, ss.Reason)
				}
				return nil
			}
			for _, sid := range st.Order {
				ss := st.Stages[sid]
				fmt.Fprintf(w, "=== %s (%s): %s\n", sid, ss.Uses, ss.Status)
				if err := copyLog(cmd.Context(), w, dir, ss.Log); err != nil {
					if errors.Is(err, userfile.ErrOutside) || errors.Is(err, userfile.ErrNotRegular) {
						fmt.Fprintf(w, "(log not shown: %v)\n", err)
						continue
					}
					fmt.Fprintf(w, "(no log: %s)\n", ss.Reason)
				}
			}
			return nil
		},
	}
	addRunsDirFlag(cmd)
	return cmd
}

// copyLog prints a stage log named in run.json. The name is confined to
// the run directory and must be a regular file: run.json is data that a
// user or another program may have edited, and `logs` must not become a
// way to print any file (or to read /dev/zero forever).
func copyLog(ctx context.Context, w io.Writer, runDir, rel string) error {
	if rel == "" {
		return fs.ErrNotExist
	}
	if _, err := userfile.Within(runDir, rel); err != nil {
		return fmt.Errorf("log: %w", err)
	}
	// A log past its size cap was rotated: its older part comes first.
	if err := copyFile(ctx, w, runDir, rel+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return copyFile(ctx, w, runDir, rel)
}

// copyFile prints the regular file rel names in runDir.
func copyFile(ctx context.Context, w io.Writer, runDir, rel string) error {
	path, err := userfile.Within(runDir, rel)
	if err != nil {
		return fmt.Errorf("log: %w", err)
	}
	f, _, err := userfile.Open(path)
	if err != nil {
		return fmt.Errorf("log %s: %w", rel, err)
	}
	defer f.Close()
	_, err = userfile.Copy(ctx, w, f)
	return err
}
