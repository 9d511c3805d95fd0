package cli

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/mspipe/mspipe/spec"
	"github.com/spf13/cobra"
)

func newResumeCmd() *cobra.Command {
	var jobs int
	cmd := &cobra.Command{
		Use:   "resume [RUN]",
		Short: "Continue a failed or interrupted run",
		Long: `Continue a run that failed, was cancelled or was interrupted (its mspipe
killed): stages that succeeded, were cached or skipped keep their outputs;
the others run again, with every stage that depends on them. RUN is a run id
(see mspipe runs) or "latest" (the default).

A run has one writer: a run still being run or resumed by a live mspipe is
refused, with that process's pid.`,
		Example: `  mspipe resume
  mspipe resume 20261123-054012-a1b2c3`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkJobs(jobs); err != nil {
				return err
			}
			store, dir, st, err := openRun(cmd, args)
			if err != nil {
				return err
			}
			id := st.ID
			env, err := newStageEnv(st.SpecDir)
			if err != nil {
				return err
			}
			defer env.Close() // the plugin processes kept between stages
			if p, _, err := spec.Load(filepath.Join(dir, "pipeline.yaml")); err == nil && p != nil {
				env.UsePins(p)
			}
			eng := &pipeline.Engine{
				Store: store, Launcher: env, Catalog: env,
				Jobs: jobs, Env: processEnv(), RankTable: rankTableInfo,
			}
			endConsole := attachConsole(cmd, eng)
			_, final, err := eng.Resume(cmd.Context(), id)
			endConsole()
			if final != nil {
				fmt.Fprintln(cmd.OutOrStdout(), final.ID)
			}
			if errors.Is(err, pipeline.ErrNothingToResume) {
				fmt.Fprintf(cmd.ErrOrStderr(), "run %s already succeeded: nothing to resume (%s)\n", id, filepath.Join(dir, "run.json"))
				return nil
			}
			return runExit(err)
		},
	}
	cmd.Flags().IntVar(&jobs, "jobs", 2, "stages run at the same time at most")
	addProgressFlag(cmd)
	addRunsDirFlag(cmd)
	return cmd
}

// runArg picks the run named on the command line, or the latest one.
func runArg(store *pipeline.Store, args []string) (string, error) {
	if len(args) == 0 || args[0] == "latest" {
		return store.Latest()
	}
	return args[0], nil
}

// openRun finds the run args[0] names (default: the latest) and reads its
// state as a reader sees it (a killed run is interrupted); a missing run is
// a usage error, a corrupt state an error.
func openRun(cmd *cobra.Command, args []string) (*pipeline.Store, string, *pipeline.RunState, error) {
	store := &pipeline.Store{Dir: runsDir(cmd)}
	id, err := runArg(store, args)
	if err != nil {
		return nil, "", nil, usageErr(err)
	}
	dir, st, err := store.Open(id)
	if err != nil {
		if errors.Is(err, pipeline.ErrRunNotFound) {
			return nil, "", nil, usageErr(err)
		}
		return nil, "", nil, err
	}
	return store, dir, st, nil
}
