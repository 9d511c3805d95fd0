package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/procgroup"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// ErrRankFailed is wrapped by the error Run returns when a rank failed.
var ErrRankFailed = errors.New("rank failed")

// RankFailure is the error Run returns when a rank failed; it wraps
// ErrRankFailed. Rank is the rank the error names as the cause. Lost says
// that rank is gone or declared dead — killed by a signal Run did not
// send, found stopped, or hung while the ranks that failed blamed it — as
// opposed to one that ended with an error of its own (a diverged loss, a
// bad file), which another device would not cure: npu/train's
// on_failure: shrink continues without a lost rank only.
type RankFailure struct {
	Rank int
	Lost bool
	msg  string
}

func (e *RankFailure) Error() string { return e.msg }

// Unwrap returns ErrRankFailed.
func (e *RankFailure) Unwrap() error { return ErrRankFailed }

// Rank is one process of a job on this host.
type Rank struct {
	RankID   int
	DeviceID int
}

// Job is a set of rank processes running the same command.
type Job struct {
	Path string   // executable
	Args []string // arguments, the same for every rank
	// Dir is the job directory: rank r runs in Dir/device{r}, created if
	// missing (an existing one is kept, so a restarted job finds its
	// checkpoints).
	Dir       string
	RankSize  int
	Ranks     []Rank // the ranks to start here
	RankTable string // RANK_TABLE_FILE; may be empty
	Env       []string
	// ExtraFiles are open in every rank as file descriptors 3, 4, ...
	// (exec.Cmd.ExtraFiles), e.g. the write end of an event pipe.
	ExtraFiles []*os.File
	// Grace is how long ranks get after SIGTERM before SIGKILL (default 5s).
	Grace time.Duration
	// PeerFailWait is how long the other ranks may take to notice a failed
	// rank on their own (a collective naming the dead peer) before they are
	// stopped; 0 stops them at once. Cancelling ctx always stops them at once,
	// and so does a rank found stopped (SIGSTOP, a debugger; Linux tells)
	// after a failure: it notices nothing, and nothing can complete.
	PeerFailWait time.Duration
	// Blame, if set, tells which rank a failed rank blames for its failure
	// (a peer that did not answer, died or aborted), if it names one. When
	// every rank still running is blamed by a failed one, those ranks hang:
	// nothing is left to notice anything, so Run kills them at once instead
	// of waiting for PeerFailWait and the grace period, and names them.
	Blame func(failed Rank) (culprit int, ok bool)
}

// DeviceDir is the directory of a rank inside the job directory.
func DeviceDir(jobDir string, rank int) string {
	return filepath.Join(jobDir, "device"+strconv.Itoa(rank))
}

// LogPath is the file a rank's stdout and stderr go to: train.log{rank}.
func LogPath(jobDir string, rank int) string {
	return filepath.Join(DeviceDir(jobDir, rank), "train.log"+strconv.Itoa(rank))
}

// RankEnv is the seeds' per-device environment.
func RankEnv(r Rank, rankSize int, rankTable string) []string {
	env := []string{
		"DEVICE_ID=" + strconv.Itoa(r.DeviceID),
		"RANK_ID=" + strconv.Itoa(r.RankID),
		"RANK_SIZE=" + strconv.Itoa(rankSize),
	}
	if rankTable != "" {
		env = append(env, "RANK_TABLE_FILE="+rankTable)
	}
	return env
}

type proc struct {
	rank   Rank
	cmd    *exec.Cmd
	log    *os.File
	err    error
	exited bool
}

// stoppedPoll is how often Run looks, after a failure, whether the ranks
// still running are stopped.
const stoppedPoll = 50 * time.Millisecond

// Run starts every rank and waits for all of them. When a rank exits with
// an error, or ctx is done, the remaining ranks get SIGTERM (and SIGCONT,
// so that a stopped one handles it), then SIGKILL after the grace period.
// The error names the rank that caused the failure — a rank killed by a
// signal Run did not send, else a rank found stopped after a failure, else
// a rank that the failed ranks blame (Job.Blame) and that did not exit,
// else the first rank that failed — and quotes the end of the log of the
// first rank that failed.
func Run(ctx context.Context, job Job) error {
	if job.Grace <= 0 {
		job.Grace = 5 * time.Second
	}
	if len(job.Ranks) == 0 {
		return fmt.Errorf("launch: no ranks")
	}
	// Ranks run in their device{i}/ directories: a relative rank table
	// path would not be found there.
	if job.RankTable != "" {
		abs, err := filepath.Abs(job.RankTable)
		if err != nil {
			return fmt.Errorf("launch: rank table %s: %w", job.RankTable, err)
		}
		job.RankTable = abs
	}
	procs := make([]*proc, 0, len(job.Ranks))
	stopAll := func() {
		for _, p := range procs {
			signalGroup(p.cmd, syscall.SIGTERM)
			continueGroup(p)
		}
	}
	type exit struct {
		p   *proc
		err error
	}
	exits := make(chan exit, len(job.Ranks))
	// A job of many ranks takes long to start: once a rank has failed (or
	// ctx is done) the rest are not started, only the started ones stopped.
	var anyFailed atomic.Bool
	for _, r := range job.Ranks {
		if anyFailed.Load() || ctx.Err() != nil {
			break
		}
		p, err := start(job, r)
		if err != nil {
			stopAll()
			grace := time.NewTimer(job.Grace)
			for n := 0; n < len(procs); {
				select {
				case e := <-exits:
					e.p.log.Close()
					n++
				case <-grace.C:
					for _, p := range procs {
						signalGroup(p.cmd, syscall.SIGKILL)
					}
				}
			}
			grace.Stop()
			return err
		}
		procs = append(procs, p)
		go func(p *proc) {
			err := p.cmd.Wait()
			if err != nil {
				anyFailed.Store(true)
			}
			exits <- exit{p, err}
		}(p)
	}

	var first, stopped, hung *proc
	blamed := map[int]bool{} // ranks that failed ranks blame
	var once sync.Once
	stopping := false
	kill := time.NewTimer(time.Hour)
	kill.Stop()
	stop := func() {
		once.Do(func() {
			stopping = true
			stopAll()
			kill.Reset(job.Grace)
		})
	}
	// After a failure, peers get PeerFailWait to fail by themselves.
	peerWait := time.NewTimer(time.Hour)
	peerWait.Stop()
	// A rank stopped after a failure notices nothing and keeps the others
	// from completing anything: waiting PeerFailWait for it is pointless.
	// It has nothing to finish either, so it gets SIGKILL, not a grace
	// period. While peers may still fail by themselves, Run looks again
	// every stoppedPoll.
	killStopped := func() {
		for _, p := range procs {
			if !p.exited && p.cmd.Process != nil && procgroup.Stopped(p.cmd.Process.Pid) {
				signalGroup(p.cmd, syscall.SIGKILL)
				if stopped == nil {
					stopped = p
				}
			}
		}
		if stopped != nil {
			stop()
		}
	}
	var poll <-chan time.Time
	var pollTicker *time.Ticker
	defer func() {
		if pollTicker != nil {
			pollTicker.Stop()
		}
	}()
	// killHung ends the job when every rank still running is blamed by a
	// failed rank.
	killHung := func() {
		var running []*proc
		for _, p := range procs {
			if !p.exited {
				if !blamed[p.rank.RankID] {
					return
				}
				// A rank that died (a SIGKILL) is blamed by its peers
				// before its own exit is reaped: it did not hang, and its
				// exit, on its way, names the cause.
				if p.cmd.Process != nil && procgroup.Exited(p.cmd.Process.Pid) {
					return
				}
				running = append(running, p)
			}
		}
		for _, p := range running {
			signalGroup(p.cmd, syscall.SIGKILL)
		}
		if len(running) > 0 {
			hung = running[0]
			stop()
		}
	}
	failed := false
	done := ctx.Done()
	for remaining := len(procs); remaining > 0; {
		select {
		case e := <-exits:
			remaining--
			e.p.err, e.p.exited = e.err, true
			e.p.log.Close()
			if e.err != nil && !stopping {
				// A rank killed by a signal we did not send is the cause;
				// ranks that exit because a peer vanished are its effect,
				// and they may be reaped first.
				if first == nil || (killedBySignal(e.err) && !killedBySignal(first.err)) {
					first = e.p
				}
				if job.Blame != nil {
					if c, ok := job.Blame(e.p.rank); ok {
						blamed[c] = true
					}
				}
				killStopped()
				if !stopping {
					killHung()
				}
				switch {
				case stopping:
				case job.PeerFailWait <= 0:
					stop()
				case !failed:
					peerWait.Reset(job.PeerFailWait)
					pollTicker = time.NewTicker(stoppedPoll)
					poll = pollTicker.C
				}
				failed = true
			}
		case <-peerWait.C:
			stop()
		case <-poll:
			if !stopping {
				killStopped()
			}
			if stopping {
				poll = nil
			}
		case <-done:
			done = nil
			stop()
		case <-kill.C:
			for _, p := range procs {
				signalGroup(p.cmd, syscall.SIGKILL)
			}
		}
	}
	kill.Stop()
	peerWait.Stop()
	// Ranks may have left children in their groups: make sure none survive.
	for _, p := range procs {
		signalGroup(p.cmd, syscall.SIGKILL)
	}
	if first != nil {
		firstErr := fmt.Sprintf("rank %d (device %d) %v%s", first.rank.RankID, first.rank.DeviceID, first.err, logTail(LogPath(job.Dir, first.rank.RankID)))
		switch {
		case killedBySignal(first.err):
			return &RankFailure{Rank: first.rank.RankID, Lost: true, msg: fmt.Sprintf("%v: %s", ErrRankFailed, firstErr)}
		case stopped != nil:
			return &RankFailure{Rank: stopped.rank.RankID, Lost: true, msg: fmt.Sprintf("%v: rank %d (device %d) was stopped (SIGSTOP or a debugger) while the job failed; first failed %s",
				ErrRankFailed, stopped.rank.RankID, stopped.rank.DeviceID, firstErr)}
		case hung != nil:
			return &RankFailure{Rank: hung.rank.RankID, Lost: true, msg: fmt.Sprintf("%v: rank %d (device %d) hung: the other ranks failed blaming it and it did not exit; first failed %s",
				ErrRankFailed, hung.rank.RankID, hung.rank.DeviceID, firstErr)}
		}
		return &RankFailure{Rank: first.rank.RankID, msg: fmt.Sprintf("%v: %s", ErrRankFailed, firstErr)}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return nil
}

func start(job Job, r Rank) (*proc, error) {
	dir := DeviceDir(job.Dir, r.RankID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("launch rank %d: %w", r.RankID, err)
	}
	env := append(append(os.Environ(), job.Env...), RankEnv(r, job.RankSize, job.RankTable)...)
	// The seeds' scripts run `env > env$i.log` before starting a rank. The
	// environment may hold secrets: the file is the owner's alone (0600,
	// also when an earlier attempt left a readable one).
	envLog := filepath.Join(dir, "env"+strconv.Itoa(r.RankID)+".log")
	if err := atomicfile.WriteFile(envLog, []byte(strings.Join(env, "\n")+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("launch rank %d: %w", r.RankID, err)
	}
	log, err := os.OpenFile(LogPath(job.Dir, r.RankID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("launch rank %d: %w", r.RankID, err)
	}
	cmd := exec.Command(job.Path, job.Args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = job.ExtraFiles
	if err := procgroup.Prepare(cmd); err != nil {
		log.Close()
		return nil, fmt.Errorf("launch rank %d: %w", r.RankID, err)
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("launch rank %d: %w", r.RankID, err)
	}
	return &proc{rank: r, cmd: cmd, log: log}, nil
}

func killedBySignal(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return ws.Signaled()
		}
	}
	return false
}

// signalGroup signals a rank's process group; a group that is gone is
// fine, and there is nothing better to do when signalling fails.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil {
		_ = procgroup.Signal(cmd.Process.Pid, sig)
	}
}

// logTail returns the last lines of a log, for error messages.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	// A Go crash ends with a long stack trace: its message is the line
	// that starts it.
	for _, l := range lines {
		if strings.HasPrefix(l, "fatal error: ") || strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "runtime/cgo: ") {
			return ": " + l
		}
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return ": " + strings.Join(lines, " | ")
}

// LocalRankTable writes a rank table for devices simulated devices on this
// machine (loopback device IPs) into dir as rank_table_{N}pcs.json, the
// seeds' name, and returns its path. More than 8 devices are whole 8-device
// simulated hosts (as `mspipe ranktable generate --hosts N --scheme local`
// writes them): what cluster.devices accepts, 16 to 2032 in steps of 8.
func LocalRankTable(dir string, devices int) (string, error) {
	opts := ranktable.GenerateOptions{Devices: devices, Scheme: ranktable.SchemeLocal}
	if devices > 8 && devices%8 == 0 {
		opts.Devices, opts.Hosts = 8, devices/8
	}
	t, err := ranktable.Generate(opts)
	if err != nil {
		return "", fmt.Errorf("generate a rank table for %d devices: %w", devices, err)
	}
	path := filepath.Join(dir, fmt.Sprintf("rank_table_%dpcs.json", devices))
	if err := atomicfile.WriteFile(path, t.Encode(), 0o644); err != nil {
		return "", err
	}
	return path, nil
}
