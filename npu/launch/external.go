package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/procgroup"
	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// ExternalJob is a job whose ranks one launcher process starts: mpirun on
// the hosts of a hostfile, or srun inside a Slurm allocation. Each rank
// process calls Attach to take its rank from the launcher's variables.
type ExternalJob struct {
	Launcher Launcher // MPIRun or Srun
	// Program is the launcher's executable; "" looks up mpirun or srun
	// in PATH.
	Program string
	Path    string   // the rank executable, the same path on every host
	Args    []string // arguments, the same for every rank
	// Dir is the job directory; rank r works in Dir/device{r}. It must be
	// on a filesystem every host sees.
	Dir string
	// RankTable is the rank table file (RANK_TABLE_FILE), also on a
	// filesystem every host sees; ranks are placed as it says.
	RankTable string
	// Env holds NAME=value variables the ranks need besides the ones
	// Attach reads; the launcher passes them on to every host.
	Env []string
	// Hostfile is mpirun's hostfile; "" writes one in Dir from the rank
	// table's servers.
	Hostfile string
	// LauncherArgs are appended to the launcher's own options verbatim,
	// one argv entry each.
	LauncherArgs []string
	// Grace is how long the launcher gets after SIGTERM (which it forwards
	// to the ranks) before SIGKILL (default 10s).
	Grace time.Duration
	// ExitWait bounds, for srun, how long the other ranks may run after
	// one has exited successfully (--wait); 0 means no bound.
	ExitWait time.Duration
	// Events receives the rest of every EventPrefix line, newline
	// included; nil drops them.
	Events io.Writer
	// Warn, if set, is told about output that could not be read as the
	// ranks meant it (lines of several ranks run together).
	Warn func(string)
	// Info, if set, is told the launcher's command line.
	Info func(string)
	// Blame, if set, tells which rank a failed rank blames for its
	// failure (a peer that died or did not answer), as Job.Blame.
	Blame func(failed Rank) (culprit int, ok bool)
}

// Variables the launcher passes to every rank, which Attach reads.
const (
	// EnvLauncher names the launcher that started a rank.
	EnvLauncher = "MSPIPE_LAUNCHER"
	// EnvJobDir is the job directory.
	EnvJobDir = "MSPIPE_JOB_DIR"
)

// maxHostfileBytes bounds the hostfile read: a line per host.
const maxHostfileBytes = 1 << 20

// EnvSrunAllocate, set to 1, lets srun run outside a Slurm allocation
// (where it asks Slurm for one itself, and may wait in the queue).
const EnvSrunAllocate = "MSPIPE_SRUN_ALLOCATE"

// checkLauncherInputs checks, before the launcher starts, what it would
// otherwise trip over with a message of its own: a hostfile that is not a
// regular file of host lines (a device such as /dev/zero would be read
// without end), srun outside an allocation.
func checkLauncherInputs(ctx context.Context, job ExternalJob, getenv func(string) string) error {
	switch job.Launcher {
	case MPIRun:
		if job.Hostfile == "" {
			return nil
		}
		data, err := userfile.ReadFile(ctx, job.Hostfile, maxHostfileBytes)
		if err != nil {
			return fmt.Errorf("launch: hostfile %s: %w", job.Hostfile, err)
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return fmt.Errorf("launch: hostfile %s lists no hosts", job.Hostfile)
		}
	case Srun:
		if getenv("SLURM_JOB_ID") == "" && getenv("SLURM_JOBID") == "" && getenv(EnvSrunAllocate) != "1" {
			return fmt.Errorf("launch: srun outside a Slurm allocation (SLURM_JOB_ID is not set): run mspipe inside salloc or sbatch, or set %s=1 to let srun ask Slurm for an allocation itself", EnvSrunAllocate)
		}
	}
	return nil
}

// RunExternal starts the job's launcher, which starts every rank, and
// waits for it. The launcher runs in its own process group; cancelling ctx
// sends it SIGTERM, which it forwards to the ranks, then SIGKILL after the
// grace period. When the job fails, the error names the rank at fault and
// its host — a rank that reported an error other than being stopped, else
// one that started and vanished without a word, else one that never
// started — and quotes the end of its train.log{rank} and of the
// launcher's output.
func RunExternal(ctx context.Context, job ExternalJob) error {
	if job.Grace <= 0 {
		job.Grace = 10 * time.Second
	}
	var err error
	if job.Dir, err = filepath.Abs(job.Dir); err != nil {
		return fmt.Errorf("launch: job directory: %w", err)
	}
	if job.RankTable, err = filepath.Abs(job.RankTable); err != nil {
		return fmt.Errorf("launch: rank table: %w", err)
	}
	t, problems, err := ranktable.Load(job.RankTable)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if problems.HasErrors() {
		return fmt.Errorf("launch: rank table %s: %w", job.RankTable, problems.Err())
	}
	args, hostfile, err := LauncherCommand(job, t, os.Geteuid())
	if err != nil {
		return err
	}
	if err := checkLauncherInputs(ctx, job, os.Getenv); err != nil {
		return err
	}
	if job.Launcher == MPIRun && job.Hostfile == "" {
		if err := atomicfile.WriteFile(hostfile, Hostfile(t), 0o644); err != nil {
			return fmt.Errorf("launch: hostfile: %w", err)
		}
	}
	program := job.Program
	if program == "" {
		if program, err = exec.LookPath(job.Launcher.String()); err != nil {
			return fmt.Errorf("launch: %s: %w (install %s, or use launcher: local)", job.Launcher, err, launcherPackage[job.Launcher])
		}
	}
	cmd := exec.Command(program, args...)
	if job.Info != nil {
		job.Info(strings.Join(cmd.Args, " "))
	}
	cmd.Dir = job.Dir
	cmd.Env = append(append(os.Environ(), job.Env...),
		EnvLauncher+"="+job.Launcher.String(),
		EnvJobDir+"="+job.Dir,
		"RANK_TABLE_FILE="+job.RankTable,
		"RANK_SIZE="+strconv.Itoa(t.RankSize()),
	)
	out := &launcherOutput{events: job.Events, warn: job.Warn, ranks: map[int]*rankState{}}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return fmt.Errorf("launch: %w", err)
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	if err := procgroup.Prepare(cmd); err != nil {
		closeAll(stdoutR, stdoutW, stderrR, stderrW)
		return fmt.Errorf("launch: %w", err)
	}
	softDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		closeAll(stdoutR, stdoutW, stderrR, stderrW)
		return fmt.Errorf("launch: start %s: %w", job.Launcher, err)
	}
	// Only the launcher holds the write ends now: the readers see EOF
	// when it and whatever it started are gone.
	closeAll(stdoutW, stderrW)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); out.read(stdoutR, true) }()
	go func() { defer readers.Done(); out.read(stderrR, false) }()

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var waitErr error
	kill := time.NewTimer(time.Hour)
	kill.Stop()
	done := ctx.Done()
wait:
	for {
		select {
		case waitErr = <-exited:
			break wait
		case <-done:
			done = nil
			out.cancel()
			_ = procgroup.Signal(cmd.Process.Pid, syscall.SIGTERM)
			kill.Reset(job.Grace)
		case <-kill.C:
			_ = procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	kill.Stop()
	// Anything left in the launcher's group goes with it. Ranks are in
	// groups of their own (mpirun makes them); they end themselves when
	// their parent is gone (Attach).
	_ = procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL)
	// A process that kept the launcher's stdout open must not hold the
	// stage: read what is there, then stop.
	readDone := make(chan struct{})
	go func() { readers.Wait(); close(readDone) }()
	select {
	case <-readDone:
	case <-time.After(5 * time.Second):
		_ = stdoutR.SetReadDeadline(time.Now())
		_ = stderrR.SetReadDeadline(time.Now())
		<-readDone
	}
	closeAll(stdoutR, stderrR)
	out.finish()
	if waitErr == nil && ctx.Err() == nil {
		return nil
	}
	if waitErr == nil {
		waitErr = errors.New("exited early")
	}
	return out.failure(ctx, job, t, waitErr)
}

// launcherPackage names where a launcher comes from, for errors.
var launcherPackage = map[Launcher]string{MPIRun: "Open MPI (openmpi-bin)", Srun: "Slurm (slurm-client)"}

func closeAll(files ...*os.File) {
	for _, f := range files {
		f.Close()
	}
}
