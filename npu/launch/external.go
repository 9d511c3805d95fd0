package launch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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

// Lines a rank writes on the stdout the launcher gave it, which mpirun and
// srun forward to their own stdout, from every host. Every other line is
// the launcher's (or a rank's before it attached) and is kept for error
// messages.
const (
	// EventPrefix starts a line whose rest is for ExternalJob.Events.
	EventPrefix = "@mspipe-event "
	// statusPrefix starts a line with a rankStatus.
	statusPrefix = "@mspipe-rank "
	// maxLauncherLine bounds a line read from the launcher; the rest of a
	// longer line is dropped.
	maxLauncherLine = 64 << 10
	// tailLines is how many lines of the launcher's output an error quotes.
	tailLines = 8
)

// rankStatus is what a rank says about itself on a status line: once
// when it knows its rank ("start"), once when it ends ("exit", with its
// error if it failed).
type rankStatus struct {
	Rank  int    `json:"rank"`
	Host  string `json:"host"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

const (
	stateStart = "start"
	stateExit  = "exit"
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

// LauncherCommand returns the launcher's argument list for job (without
// the program name) and the hostfile it uses ("" for srun). It does not
// write the hostfile.
func LauncherCommand(job ExternalJob, t *ranktable.RankTable, euid int) (args []string, hostfile string, err error) {
	size := t.RankSize()
	if size == 0 {
		return nil, "", fmt.Errorf("launch: rank table %s has no devices", job.RankTable)
	}
	switch job.Launcher {
	case MPIRun:
		hostfile = job.Hostfile
		if hostfile == "" {
			hostfile = filepath.Join(job.Dir, "hostfile")
		}
		// --map-by slot fills the hostfile's hosts in order, slots at a
		// time: rank r lands on the server the rank table puts it on.
		args = []string{"-np", strconv.Itoa(size), "--hostfile", hostfile, "--map-by", "slot"}
		if euid == 0 {
			args = append(args, "--allow-run-as-root")
		}
		// -x NAME exports the variable with the value mpirun has, which
		// keeps values off the command line (ps shows it).
		for _, name := range exportedNames(job) {
			args = append(args, "-x", name)
		}
	case Srun:
		perNode := len(t.ServerList[0].Device)
		for _, s := range t.ServerList {
			if len(s.Device) != perNode {
				return nil, "", fmt.Errorf("launch: srun places the same number of ranks on every node, but rank table %s has servers with %d and %d devices", job.RankTable, perNode, len(s.Device))
			}
		}
		args = []string{
			"--ntasks", strconv.Itoa(size), "--nodes", strconv.Itoa(len(t.ServerList)),
			"--ntasks-per-node", strconv.Itoa(perNode), "--distribution", "block",
			"--kill-on-bad-exit=1", "--export", "ALL",
		}
		if job.ExitWait > 0 {
			args = append(args, "--wait", strconv.Itoa(int(max(job.ExitWait/time.Second, 1))))
		}
	default:
		return nil, "", fmt.Errorf("launch: %s is not an external launcher", job.Launcher)
	}
	args = append(args, job.LauncherArgs...)
	args = append(args, job.Path)
	return append(args, job.Args...), hostfile, nil
}

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

// exportedNames lists the variables a rank needs from the launcher's
// environment, in a fixed order.
func exportedNames(job ExternalJob) []string {
	names := []string{EnvLauncher, EnvJobDir, "RANK_TABLE_FILE", "RANK_SIZE"}
	for _, kv := range job.Env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// Hostfile returns an Open MPI hostfile for a rank table: its servers in
// table order, each with as many slots as it has devices.
func Hostfile(t *ranktable.RankTable) []byte {
	var b bytes.Buffer
	for _, s := range t.ServerList {
		fmt.Fprintf(&b, "%s slots=%d\n", s.ServerID, len(s.Device))
	}
	return b.Bytes()
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

// rankState is what the launcher's output told about one rank.
type rankState struct {
	host    string
	started bool
	exited  bool
	err     string
	order   int // when it reported its error
}

// launcherOutput sorts the launcher's output into events, rank statuses
// and the rest.
type launcherOutput struct {
	events io.Writer
	warn   func(string)

	mu      sync.Mutex
	ranks   map[int]*rankState
	errs    int
	tail    []string // the launcher's last lines, both streams
	garbled int      // lines holding a prefix not at their start
	first   string   // the first garbled line
	named   []int    // ranks the launcher said failed, in its order
	// canceled is set when the caller cancelled: errors reported after
	// that are the cancel's effect.
	canceled bool
}

// launcherBlames matches the launcher's own lines that name a failed rank:
// mpirun's "process rank 5 with PID ... exited on signal 9" and its
// "Process name: [[1234,1],5]", srun's "srun: error: host: task 5: Killed".
var launcherBlames = []*regexp.Regexp{
	regexp.MustCompile(`process rank (\d+) with PID`),
	regexp.MustCompile(`Process name: \[\[\d+,\d+\],(\d+)\]`),
	regexp.MustCompile(`srun: error: .*: tasks? (\d+)[-,:]`),
}

func (o *launcherOutput) cancel() {
	o.mu.Lock()
	o.canceled = true
	o.mu.Unlock()
}

func (o *launcherOutput) read(r io.Reader, stdout bool) {
	rd := bufio.NewReaderSize(r, maxLauncherLine)
	for {
		line, err := rd.ReadSlice('\n')
		long := errors.Is(err, bufio.ErrBufferFull)
		if len(line) > 0 {
			o.line(bytes.TrimRight(line, "\r\n"), stdout)
		}
		for long {
			// The rest of a line too long to be an event is dropped.
			_, err = rd.ReadSlice('\n')
			long = errors.Is(err, bufio.ErrBufferFull)
		}
		if err != nil {
			return
		}
	}
}

func (o *launcherOutput) line(line []byte, stdout bool) {
	switch {
	case stdout && bytes.HasPrefix(line, []byte(EventPrefix)):
		if o.events != nil {
			// One write per line: the reader sees whole lines.
			_, _ = o.events.Write(append(slices.Clone(line[len(EventPrefix):]), '\n'))
		}
		return
	case stdout && bytes.HasPrefix(line, []byte(statusPrefix)):
		var st rankStatus
		if err := json.Unmarshal(line[len(statusPrefix):], &st); err == nil && st.Rank >= 0 {
			o.status(st)
			return
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if bytes.Contains(line, []byte(EventPrefix)) || bytes.Contains(line, []byte(statusPrefix)) {
		if o.garbled++; o.garbled == 1 {
			o.first = string(line)
		}
		return
	}
	for _, re := range launcherBlames {
		if m := re.FindSubmatch(line); m != nil {
			if r, err := strconv.Atoi(string(m[1])); err == nil && !slices.Contains(o.named, r) {
				o.named = append(o.named, r)
			}
		}
	}
	o.tail = append(o.tail, string(line))
	if len(o.tail) > tailLines {
		o.tail = o.tail[len(o.tail)-tailLines:]
	}
}

func (o *launcherOutput) status(st rankStatus) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.ranks[st.Rank]
	if r == nil {
		r = &rankState{}
		o.ranks[st.Rank] = r
	}
	if st.Host != "" {
		r.host = st.Host
	}
	switch st.State {
	case stateStart:
		r.started = true
	case stateExit:
		r.started, r.exited = true, true
		if st.Error != "" && r.err == "" && !o.canceled {
			o.errs++
			r.err, r.order = st.Error, o.errs
		}
	}
}

// finish reports garbled lines.
func (o *launcherOutput) finish() {
	if o.garbled > 0 && o.warn != nil {
		first := o.first
		if len(first) > 200 {
			first = first[:200] + "…"
		}
		o.warn(fmt.Sprintf("launcher output: %d line(s) with rank output run together skipped, the first: %q", o.garbled, first))
	}
}

// stoppedError tells a rank that was stopped (the launcher's SIGTERM after
// another rank failed, or the caller's cancel) from one that failed itself.
func stoppedError(msg string) bool {
	return strings.Contains(msg, context.Canceled.Error()) || strings.Contains(msg, "signal: terminated")
}

// failure builds the error of a failed job: see RunExternal.
func (o *launcherOutput) failure(ctx context.Context, job ExternalJob, t *ranktable.RankTable, waitErr error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	ranks, _ := t.Ranks()
	server := func(rank int) string {
		for _, r := range ranks {
			if r.RankID == rank {
				return r.ServerID
			}
		}
		return "?"
	}
	const silentWhy = "ended without reporting why (killed by a signal?)"
	silent := func(rank int) bool {
		s := o.ranks[rank]
		return s != nil && s.started && !s.exited
	}
	failedItself := func(rank int) bool {
		s := o.ranks[rank]
		return s != nil && s.err != "" && !stoppedError(s.err)
	}
	culprit, why := -1, ""
	if !o.canceled {
		// The rank the launcher names as the first to die or fail: the
		// others' errors (a peer that closed its connection) are its
		// effect, even when they are reported first.
		for _, r := range o.named {
			if silent(r) {
				culprit, why = r, silentWhy
			} else if failedItself(r) {
				culprit, why = r, o.ranks[r].err
			}
			if culprit >= 0 {
				break
			}
		}
	}
	if culprit < 0 {
		// Else the first rank that reported its own failure.
		best := 0
		for id, r := range o.ranks {
			if failedItself(id) && (best == 0 || r.order < best) {
				culprit, best, why = id, r.order, r.err
			}
		}
	}
	if culprit < 0 && !o.canceled {
		// Else a rank that vanished without a word, else one that never
		// started (missing on a host, or it could not read its variables).
		for _, r := range ranks {
			if silent(r.RankID) {
				culprit, why = r.RankID, silentWhy
				break
			}
		}
		for _, r := range ranks {
			if culprit < 0 && o.ranks[r.RankID] == nil {
				culprit, why = r.RankID, "never started"
			}
		}
	}
	// A failed rank may blame a peer: follow the blame to a rank that
	// failed or vanished itself, the cause.
	for seen := map[int]bool{}; culprit >= 0 && job.Blame != nil && !seen[culprit]; {
		seen[culprit] = true
		b, ok := job.Blame(Rank{RankID: culprit, DeviceID: -1})
		if !ok || b == culprit || !(silent(b) || failedItself(b) || o.ranks[b] == nil && !o.canceled) {
			break
		}
		culprit = b
		switch s := o.ranks[b]; {
		case s == nil:
			why = "never started"
		case silent(b):
			why = silentWhy
		default:
			why = s.err
		}
	}
	launcher := fmt.Sprintf("%s %v", job.Launcher, waitErr)
	if len(o.tail) > 0 {
		launcher += ": " + strings.Join(o.tail, " | ")
	}
	if culprit < 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s", ErrRankFailed, launcher)
	}
	// The host the rank ran on, as it said, and the server the rank
	// table puts it on: they differ when the launcher placed it wrongly.
	where := "server " + server(culprit)
	if s := o.ranks[culprit]; s != nil && s.host != "" {
		where = "host " + s.host + ", " + where
	}
	return fmt.Errorf("%w: rank %d (%s) %s%s; %s", ErrRankFailed, culprit, where, why,
		logTail(LogPath(job.Dir, culprit)), launcher)
}
