package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

func newLogsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logs [RUN [STAGE]]",
		Short: "Print the logs of a run or of one of its stages",
		Long: `Print stage logs of a run: every stage's log in order, or one stage's.
RUN is a run id or "latest" (the default).`,
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
			if len(args) == 2 {
				ss, ok := st.Stages[args[1]]
				if !ok {
					return usageErr(fmt.Errorf("run %s has no stage %q (stages: %v)", id, args[1], st.Order))
				}
				if err := copyLog(w, filepath.Join(dir, ss.Log)); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "stage %s of run %s has no log: it is %s (%s)\n", args[1], id, ss.Status, ss.Reason)
				}
				return nil
			}
			for _, sid := range st.Order {
				ss := st.Stages[sid]
				fmt.Fprintf(w, "=== %s (%s): %s\n", sid, ss.Uses, ss.Status)
				if err := copyLog(w, filepath.Join(dir, ss.Log)); err != nil {
					fmt.Fprintf(w, "(no log: %s)\n", ss.Reason)
				}
			}
			return nil
		},
	}
	addRunsDirFlag(cmd)
	return cmd
}

func copyLog(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
