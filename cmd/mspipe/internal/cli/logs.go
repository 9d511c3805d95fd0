package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/pipeline"
	"github.com/spf13/cobra"
)

func newLogsCmd() *cobra.Command {
	var (
		follow bool
		rank   int
	)
	cmd := &cobra.Command{
		Use:   "logs [RUN [STAGE]]",
		Short: "Print the logs of a run or of one of its stages",
		Long: `Print stage logs of a run: every stage's log in order, or one stage's.
RUN is a run id or "latest" (the default). The stages of a run whose mspipe
was killed show as interrupted where run.json still says running.

--rank N prints the log of rank N of a training stage (device{N}/train.log{N}
in its work directory). -f follows: it prints what is written until the
stage ends (without STAGE, each stage in turn, in the run's order).`,
		Example: `  mspipe logs
  mspipe logs latest train
  mspipe logs latest train --rank 1
  mspipe logs -f
  mspipe logs 20261123-054012-a1b2c3 prepare`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("rank") && (rank < 0 || len(args) < 2) {
				return usageErr(fmt.Errorf("--rank %d: give RUN STAGE and a rank of at least 0", rank))
			}
			store, dir, st, err := openRun(cmd, args)
			if err != nil {
				return err
			}
			id := st.ID
			w := cmd.OutOrStdout()
			if st.Status == pipeline.StatusInterrupted {
				fmt.Fprintf(cmd.ErrOrStderr(), "run %s is %s; mspipe resume %s continues it\n", id, st.Error, id)
			}
			if follow {
				return followRun(cmd.Context(), w, store, dir, st, args, rankLog(cmd, rank))
			}
			if len(args) == 2 {
				ss, ok := st.Stages[args[1]]
				if !ok {
					return usageErr(fmt.Errorf("run %s has no stage %q (stages: %v)", id, args[1], st.Order))
				}
				if cmd.Flags().Changed("rank") {
					if err := copyLog(cmd.Context(), w, dir, rankLog(cmd, rank)(ss.Log)); err != nil {
						return fmt.Errorf("run %s, stage %s: no log of rank %d: %w", id, args[1], rank, err)
					}
					return nil
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
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what the stage writes until it ends")
	cmd.Flags().IntVar(&rank, "rank", 0, "print this rank's log of a training stage (needs RUN STAGE)")
	addRunsDirFlag(cmd)
	return cmd
}

// rankLog returns how to get from a stage's log (relative to the run
// directory) to the log to print: the stage log itself, or with --rank the
// rank's train.log{N} in the stage's work directory.
func rankLog(cmd *cobra.Command, rank int) func(stageLog string) string {
	if !cmd.Flags().Changed("rank") {
		return func(stageLog string) string { return stageLog }
	}
	return func(stageLog string) string {
		if stageLog == "" {
			return ""
		}
		return launch.LogPath(filepath.Dir(stageLog), rank)
	}
}

// followInterval is how often a followed log is read again.
const followInterval = 250 * time.Millisecond

// followRun prints the log of the stage args name (every stage in turn
// without one) and what is added to it, until the stage has ended: it is
// no longer pending or running, or the run has ended.
func followRun(ctx context.Context, w io.Writer, store *pipeline.Store, dir string, st *pipeline.RunState, args []string, logOf func(string) string) error {
	stages := st.Order
	if len(args) == 2 {
		if _, ok := st.Stages[args[1]]; !ok {
			return usageErr(fmt.Errorf("run %s has no stage %q (stages: %v)", st.ID, args[1], st.Order))
		}
		stages = args[1:]
	}
	for _, sid := range stages {
		if len(args) < 2 {
			fmt.Fprintf(w, "=== %s (%s)\n", sid, st.Stages[sid].Uses)
		}
		if err := followStage(ctx, w, store, dir, st.ID, sid, logOf); err != nil {
			return err
		}
	}
	return nil
}

// followStage prints one stage's log as it grows. A log rotated past its
// size cap starts again from its beginning (what was appended to the old
// part after the last read is not shown).
func followStage(ctx context.Context, w io.Writer, store *pipeline.Store, dir, id, sid string, logOf func(string) string) error {
	var off int64
	for {
		_, st, err := store.Open(id)
		if err != nil {
			return err
		}
		ss := st.Stages[sid]
		ended := st.Status != pipeline.StatusRunning || (ss.Status != pipeline.StatusRunning && ss.Status != pipeline.StatusPending)
		if rel := logOf(ss.Log); rel != "" {
			n, err := copyFrom(ctx, w, dir, rel, off)
			switch {
			case errors.Is(err, errShrunk):
				off = 0
				continue
			case err != nil && !errors.Is(err, fs.ErrNotExist):
				return fmt.Errorf("run %s, stage %s: %w", id, sid, err)
			}
			off += n
		}
		if ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followInterval):
		}
	}
}

var errShrunk = errors.New("log is shorter than what was read: rotated")

// copyFrom prints the regular file rel names in runDir from offset off
// and returns how many bytes it printed.
func copyFrom(ctx context.Context, w io.Writer, runDir, rel string, off int64) (int64, error) {
	path, err := userfile.Within(runDir, rel)
	if err != nil {
		return 0, fmt.Errorf("log: %w", err)
	}
	f, info, err := userfile.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if info.Size() < off {
		return 0, errShrunk
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, fmt.Errorf("log %s: %w", rel, err)
	}
	return userfile.Copy(ctx, w, f)
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
