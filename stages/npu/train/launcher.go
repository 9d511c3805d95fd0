package train

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// srunExitWait bounds how long srun lets the other ranks run after one
// ended successfully: rank 0 may still evaluate when the others are done.
const srunExitWait = 30 * time.Minute

// launcherProblems checks the options that belong to one launcher.
func launcherProblems(w With) []plugins.Problem {
	var out []plugins.Problem
	if len(w.LauncherArgs) > 0 && w.Launcher == launch.Local {
		out = append(out, plugins.Problem{Path: "/launcher_args", Message: "launcher_args are for launcher mpirun or srun; the local launcher takes none"})
	}
	if w.Hostfile != "" {
		switch {
		case w.Launcher != launch.MPIRun:
			out = append(out, plugins.Problem{Path: "/hostfile", Message: fmt.Sprintf("a hostfile is for launcher mpirun, not %s", w.Launcher)})
		case !filepath.IsAbs(w.Hostfile):
			out = append(out, plugins.Problem{Path: "/hostfile", Message: fmt.Sprintf("hostfile %q: give an absolute path", w.Hostfile)})
		}
	}
	return out
}

// runExternal runs the job's ranks through mpirun or srun: one launcher
// process starts them all, on every host. Ranks cannot reach the local
// event pipe from another host, so they print their events on the stdout
// the launcher gave them, which the launcher forwards here.
func runExternal(ctx context.Context, sc sdk.Context, w With, job launch.Job) error {
	events, sink := io.Pipe()
	relayed := make(chan error, 1)
	go func() { relayed <- relayEvents(events, sc, job.RankSize) }()
	err := launch.RunExternal(ctx, launch.ExternalJob{
		Launcher: w.Launcher, Path: job.Path, Args: job.Args, Dir: job.Dir, RankTable: job.RankTable,
		Hostfile: w.Hostfile, LauncherArgs: w.LauncherArgs, ExitWait: srunExitWait,
		Events: sink, Warn: func(msg string) { sc.Warn(msg) }, Info: func(msg string) { sc.Info(msg) },
		Blame: job.Blame,
	})
	sink.Close()
	if rerr := <-relayed; rerr != nil {
		sc.Warn(rerr.Error())
	}
	return err
}

// reportExit tells the launcher's reader how the rank ended, also when it
// panics (the panic goes on, to train.log).
func reportExit(att *launch.Attached, err *error) {
	if r := recover(); r != nil {
		att.Exit(fmt.Errorf("panic: %v", r))
		panic(r)
	}
	att.Exit(*err)
}
