package launch

// Reading the launcher's output while RunExternal waits for it: the lines
// ranks write through Attach (events and rank statuses) sorted from the
// launcher's own, and the error that names the rank at fault.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

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
