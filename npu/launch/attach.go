package launch

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// launcherVars are the variables a launcher sets in each rank, most
// specific first: Open MPI's and Slurm's own, then PMIx and PMI, which
// both can provide.
var launcherVars = map[Launcher]struct{ rank, size, local []string }{
	MPIRun: {
		rank:  []string{"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"},
		size:  []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"},
		local: []string{"OMPI_COMM_WORLD_LOCAL_RANK"},
	},
	Srun: {
		rank:  []string{"SLURM_PROCID", "PMIX_RANK", "PMI_RANK"},
		size:  []string{"SLURM_NTASKS", "PMI_SIZE"},
		local: []string{"SLURM_LOCALID"},
	},
}

// launcherPlace is where a launcher says a rank is: its rank, the job's
// size, and its index among the ranks of its host (-1 when unknown).
type launcherPlace struct {
	rank, size, local int
}

// placeFromEnv reads a rank's place from the launcher's variables.
func placeFromEnv(l Launcher, getenv func(string) string) (launcherPlace, error) {
	vars, ok := launcherVars[l]
	if !ok {
		return launcherPlace{}, fmt.Errorf("%s is not an external launcher", l)
	}
	first := func(names []string, required bool) (int, error) {
		for _, name := range names {
			v := getenv(name)
			if v == "" {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%s=%q is not a rank number", name, v)
			}
			return n, nil
		}
		if required {
			return 0, fmt.Errorf("none of %s is set: was this process started by %s?", strings.Join(names, ", "), l)
		}
		return -1, nil
	}
	var p launcherPlace
	var err error
	if p.rank, err = first(vars.rank, true); err != nil {
		return p, err
	}
	if p.size, err = first(vars.size, true); err != nil {
		return p, err
	}
	if p.local, err = first(vars.local, false); err != nil {
		return p, err
	}
	if p.rank >= p.size {
		return p, fmt.Errorf("%s says rank %d of a job of %d", l, p.rank, p.size)
	}
	return p, nil
}

// Attached is a rank process started by mpirun or srun, after Attach made
// it look like one the local launcher started.
type Attached struct {
	Launcher Launcher
	Rank     Rank
	Size     int
	Host     string

	mu  sync.Mutex
	out *os.File // the stdout the launcher gave the rank
}

// Attach prepares a rank process that an external launcher started, as
// the seeds' run.sh prepares each device: it takes RANK_ID from the
// launcher's variables (OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK,
// PMI_RANK, ...), checks against the rank table that the launcher placed
// it on the right server, sets RANK_ID, DEVICE_ID and RANK_SIZE, makes and
// enters device{RANK_ID}/ in the job directory, writes env{RANK_ID}.log
// and sends stdout and stderr (file descriptors 1 and 2, so a crash's
// trace too) to train.log{RANK_ID}. The launcher's stdout is kept for
// Events and Exit.
//
// It returns nil, nil in a process no external launcher started. When it
// fails after learning the rank, it also returns the Attached, so that the
// caller can report the failure with Exit.
func Attach() (*Attached, error) {
	name := os.Getenv(EnvLauncher)
	if name == "" {
		return nil, nil
	}
	l, err := ParseLauncher(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvLauncher, err)
	}
	if l == Local {
		return nil, nil
	}
	place, err := placeFromEnv(l, os.Getenv)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	out, err := keepStdout()
	if err != nil {
		return nil, fmt.Errorf("keep the launcher's stdout: %w", err)
	}
	a := &Attached{Launcher: l, Rank: Rank{RankID: place.rank, DeviceID: -1}, Size: place.size, Host: host, out: out}
	a.writeStatus(rankStatus{Rank: place.rank, Host: host, State: stateStart})
	watchParent()
	if err := a.setup(place); err != nil {
		return a, err
	}
	return a, nil
}

func (a *Attached) setup(place launcherPlace) error {
	jobDir := os.Getenv(EnvJobDir)
	if jobDir == "" {
		return fmt.Errorf("%s is not set", EnvJobDir)
	}
	if st, err := os.Stat(jobDir); err != nil || !st.IsDir() {
		return fmt.Errorf("job directory %s is not here: the run directory must be on a filesystem every host sees", jobDir)
	}
	tablePath := os.Getenv("RANK_TABLE_FILE")
	t, problems, err := ranktable.Load(tablePath)
	if err != nil {
		return fmt.Errorf("%w (the rank table must be on a filesystem every host sees)", err)
	}
	if problems.HasErrors() {
		return fmt.Errorf("rank table %s: %w", tablePath, problems.Err())
	}
	r, err := a.placeInTable(t, place)
	if err != nil {
		return err
	}
	a.Rank.DeviceID = r.DeviceID
	for k, v := range map[string]int{"RANK_ID": r.RankID, "DEVICE_ID": r.DeviceID, "RANK_SIZE": place.size} {
		if err := os.Setenv(k, strconv.Itoa(v)); err != nil {
			return err
		}
	}
	dir := DeviceDir(jobDir, r.RankID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chdir(dir); err != nil {
		return err
	}
	// As in start: the environment may hold secrets, so the file is the
	// owner's alone.
	envLog := filepath.Join(dir, "env"+strconv.Itoa(r.RankID)+".log")
	if err := atomicfile.WriteFile(envLog, []byte(strings.Join(os.Environ(), "\n")+"\n"), 0o600); err != nil {
		return err
	}
	log, err := os.OpenFile(LogPath(jobDir, r.RankID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	if err := redirectOutput(log); err != nil {
		return fmt.Errorf("send output to %s: %w", log.Name(), err)
	}
	return nil
}

// placeInTable returns the rank table's entry for the rank the launcher
// gave, after checking that the launcher put it where the table does.
func (a *Attached) placeInTable(t *ranktable.RankTable, place launcherPlace) (ranktable.Rank, error) {
	if n := t.RankSize(); n != place.size {
		return ranktable.Rank{}, fmt.Errorf("%s started %d ranks, but rank table %s has %d devices", a.Launcher, place.size, t.File(), n)
	}
	ranks, err := t.Ranks()
	if err != nil {
		return ranktable.Rank{}, err
	}
	var r ranktable.Rank
	found := false
	for _, x := range ranks {
		if x.RankID == place.rank {
			r, found = x, true
		}
	}
	if !found {
		return r, fmt.Errorf("rank table %s has no rank %d", t.File(), place.rank)
	}
	local := -1
	for i, d := range t.ServerList[r.HostIndex].Device {
		if d.RankID == strconv.Itoa(r.RankID) {
			local = i
		}
	}
	if place.local >= 0 && place.local != local {
		return r, fmt.Errorf("%s placed rank %d on host %s as its local rank %d, but the rank table puts it on server %s as device %d (its %s of that server's devices): give the launcher the servers in the rank table's order, each with as many slots as devices",
			a.Launcher, r.RankID, a.Host, place.local, r.ServerID, r.DeviceID, ordinal(local))
	}
	// The rank listens on its device_ip (or its server's host_nic_ip):
	// only an address of this host can be bound.
	if !CanListen(r.ListenIP()) {
		return r, fmt.Errorf("%s placed rank %d on host %s, but the rank table puts it on server %s (%s %s is not an address of this host)",
			a.Launcher, r.RankID, a.Host, r.ServerID, r.ListenKey(), r.ListenIP())
	}
	return r, nil
}

// CanListen reports whether this host can listen on the IP address ip,
// that is whether it is one of the host's addresses (every loopback
// address is): where a rank whose rank table address it is can run.
func CanListen(ip string) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

func ordinal(i int) string {
	n := i + 1
	switch {
	case n%10 == 1 && n%100 != 11:
		return strconv.Itoa(n) + "st"
	case n%10 == 2 && n%100 != 12:
		return strconv.Itoa(n) + "nd"
	case n%10 == 3 && n%100 != 13:
		return strconv.Itoa(n) + "rd"
	}
	return strconv.Itoa(n) + "th"
}

// Events returns a writer to the job's event stream: each Write is sent
// as one line with EventPrefix, in one write, so that a complete line of
// up to PIPE_BUF bytes never mixes with another rank's output. Write p
// without its newline-terminated prefix: one line, newline included.
func (a *Attached) Events() io.Writer { return eventLines{a} }

type eventLines struct{ a *Attached }

func (e eventLines) Write(p []byte) (int, error) {
	line := make([]byte, 0, len(EventPrefix)+len(p))
	line = append(append(line, EventPrefix...), p...)
	e.a.mu.Lock()
	defer e.a.mu.Unlock()
	if _, err := e.a.out.Write(line); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Exit tells the launcher's reader that the rank ends, with err (nil for
// success), so that a failure is named by rank and host.
func (a *Attached) Exit(err error) {
	st := rankStatus{Rank: a.Rank.RankID, Host: a.Host, State: stateExit}
	if err != nil {
		st.Error = err.Error()
		if st.Error == "" {
			st.Error = "failed"
		}
	}
	a.writeStatus(st)
}

func (a *Attached) writeStatus(st rankStatus) {
	data, err := json.Marshal(st)
	if err != nil {
		return
	}
	line := append(append([]byte(statusPrefix), data...), '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	// Best effort: a launcher that is gone cannot read it anyway.
	_, _ = a.out.Write(line)
}

// parentPoll is how often a rank looks whether its launcher is gone.
const parentPoll = 500 * time.Millisecond

// watchParent ends the process when its parent (mpirun, orted,
// slurmstepd) is gone: mpirun puts ranks in process groups of their own,
// so a launcher killed outright could not take them along. A parent-death
// signal would fire when the launcher's thread that forked the rank
// exits, which a multi-threaded launcher may do at any time.
func watchParent() {
	parent := os.Getppid()
	go func() {
		for range time.Tick(parentPoll) {
			if os.Getppid() != parent {
				fmt.Fprintf(os.Stderr, "the launcher (process %d) is gone: stopping\n", parent)
				os.Exit(1)
			}
		}
	}()
}
