package cli

import (
	"fmt"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/spf13/cobra"
)

func newRunCmd() *cobra.Command {
	var params []string
	var jobs int
	var noCache bool
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run a pipeline",
		Long: `Run a pipeline: validate the spec, then run its stages in the order their
needs give, independent stages in parallel (up to --jobs), each in a plugin
process of its own (one after another, exec stages may share one).

Every run gets a directory under the runs dir (default ./runs) holding
run.json (the state of every stage), pipeline.yaml (the spec as run),
events.jsonl and stages/<id>/ with each stage's log and files. A stage whose
plugin, inputs and input artifacts are unchanged since an earlier run is not
run again: its outputs are reused (--no-cache turns this off).

On a terminal, stages that report progress (npu/train: steps of the job)
get a progress bar below the console lines; --no-progress turns bars off.

Ctrl-C stops the running stages (plugins get a grace period, then their whole
process group is killed) and saves the run as cancelled; ` + "`mspipe resume`" + `
continues it. The run id is printed on stdout.

Exit status: 0 succeeded, 1 invalid spec or failed stage, 2 usage error,
130 interrupted.`,
		Example: `  mspipe run examples/two-stage-training.yaml
  mspipe run examples/two-stage-training.yaml -p epochs=4 --jobs 2
  mspipe run pipeline.yaml --no-cache`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkJobs(jobs); err != nil {
				return err
			}
			ls, err := loadSpec(cmd.ErrOrStderr(), args[0], params)
			if err != nil {
				return err
			}
			// Stops the plugin processes kept for validation and the idle
			// ones kept between stages of the same kind.
			defer ls.env.Close()
			eng := newEngine(cmd, ls, jobs, noCache)
			endConsole := attachConsole(cmd, eng)
			st, err := eng.Run(cmd.Context(), ls.p, ls.data, ls.params)
			endConsole()
			if st != nil {
				fmt.Fprintln(cmd.OutOrStdout(), st.ID)
			}
			return runExit(err)
		},
	}
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "set a param: -p name=value (repeatable)")
	cmd.Flags().IntVar(&jobs, "jobs", 2, "stages run at the same time at most")
	cmd.Flags().BoolVar(&noCache, "no-cache", false, "run every stage, even when an earlier run has its outputs")
	addProgressFlag(cmd)
	addRunsDirFlag(cmd)
	return cmd
}

func newEngine(cmd *cobra.Command, ls *loadedSpec, jobs int, noCache bool) *pipeline.Engine {
	return &pipeline.Engine{
		Store:     &pipeline.Store{Dir: runsDir(cmd)},
		Launcher:  ls.env,
		Catalog:   ls.env,
		Jobs:      jobs,
		NoCache:   noCache,
		Env:       processEnv(),
		RankTable: rankTableInfo,
	}
}
