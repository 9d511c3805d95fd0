package train

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/ranktable"
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
	// Every rank runs under the launcher, rank 0 too: its lines are shown.
	go func() { relayed <- relayEvents(events, sc, job.RankSize, 0, nil) }()
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

// externalCollective sets up the collective of a job that mpirun or srun
// starts: the launcher places every rank, wherever this stage runs, and the
// run directory is shared, so the job secret can be a file in it (unless
// MSPIPE_JOB_SECRET_FILE names one). A job on this host alone picks free
// ports; one that spans hosts uses with.collective_base_port or the
// default, checked free for the ranks of this host.
func externalCollective(w With, t *ranktable.RankTable, jobDir string, cfg *job.Config) error {
	ranks, err := t.Ranks()
	if err != nil {
		return err
	}
	share := hostShare{Size: len(ranks)}
	for _, r := range ranks {
		if ip, err := netip.ParseAddr(r.ListenIP()); err == nil && canListen(ip) {
			share.Ranks = append(share.Ranks, r)
		}
	}
	cfg.SpansHosts = len(t.ServerList) > 1
	if cfg.SecretFile, err = sharedSecretFile(false); err != nil {
		return err
	}
	cfg.BasePort, err = basePort(w, t, share)
	return err
}
