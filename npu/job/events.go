package job

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/trainer"
)

// Rank processes report to the stage through an event stream: one pipe
// whose write end every rank inherits as file descriptor EventFD (the first
// of launch.Job.ExtraFiles), carrying one JSON object per line. A pipe and
// not a file, so that a retried or resumed job never replays old events.
// Each line is written with one write of at most maxEventWrite bytes, which
// POSIX makes atomic for pipes: lines of different ranks never interleave.
const (
	EventFD = 3
	// EnvEventFD names the event stream's descriptor in a rank's
	// environment. It is set only on the rank processes the stage starts:
	// a descriptor number read from a file could name any open file of a
	// process that runs the worker another way.
	EnvEventFD    = "MSPIPE_EVENT_FD"
	maxEventWrite = 4096 // PIPE_BUF on Linux
	// maxEventLine bounds a line ReadEvents reads; longer ones are skipped.
	maxEventLine = 64 << 10
	// maxEventWarnings bounds the warnings about malformed lines.
	maxEventWarnings = 5
)

// Kinds of Event.
const (
	KindStep = "step" // a finished training step
	KindLog  = "log"  // a line the rank printed to train.log{i}, for the console
	// KindFailed carries the error a rank fails with. The rank prints it
	// to train.log{i} too, but the log is on disk, and when the disk is
	// full the line saying so is the one that cannot be written.
	KindFailed = "failed"
	// KindEval is an evaluation on the test split: after an epoch, or
	// the final one after the last step (Final).
	KindEval = "eval"
)

// The metrics the npu/train stage reports for each eval event, at the
// global step the evaluation followed; the run report draws them.
const (
	MetricEvalAccuracy = "eval_accuracy"
	MetricEvalLoss     = "eval_loss"
)

// Event is one line of the event stream.
type Event struct {
	Kind            string  `json:"kind"`
	Rank            int     `json:"rank"`
	Epoch           int64   `json:"epoch,omitempty"`
	Step            int64   `json:"step,omitempty"`
	GlobalStep      int64   `json:"global_step,omitempty"`
	TotalSteps      int64   `json:"total_steps,omitempty"`
	Loss            float64 `json:"loss,omitempty"`
	LearningRate    float64 `json:"lr,omitempty"`
	ImagesPerSecond float64 `json:"images_per_second,omitempty"`
	DeviceMemory    int64   `json:"device_memory,omitempty"`
	EpochEnd        bool    `json:"epoch_end,omitempty"`
	// SaveBlocked is how long the step's checkpoint save held training up
	// (seconds), SaveWait the part of it spent waiting for the previous
	// asynchronous write (async_save).
	SaveBlocked float64 `json:"save_blocked_seconds,omitempty"`
	SaveWait    float64 `json:"save_wait_seconds,omitempty"`
	Message     string  `json:"message,omitempty"`
	// Accuracy is an eval event's held-out accuracy (Loss its mean loss):
	// a pointer, since 0 is an accuracy and must not be left out.
	Accuracy *float64 `json:"accuracy,omitempty"`
	Final    bool     `json:"final,omitempty"`
}

// eventWriter is a rank's end of the event stream. It stops writing at the
// first error (the stage is gone; the rank is about to be stopped too).
type eventWriter struct {
	mu     sync.Mutex
	w      io.Writer
	rank   int
	failed bool
	buf    []byte // the unfinished line of Write
	limit  int    // the longest line, newline included, written at once
}

func newEventWriter(w io.Writer, rank int) *eventWriter {
	return &eventWriter{w: w, rank: rank, limit: maxEventWrite}
}

// step sends a finished training step.
func (e *eventWriter) step(s trainer.StepInfo) {
	e.send(Event{
		Kind: KindStep, Rank: e.rank, Epoch: int64(s.Epoch), Step: int64(s.StepInEpoch),
		GlobalStep: int64(s.GlobalStep), TotalSteps: int64(s.TotalSteps),
		Loss: float64(s.Loss), LearningRate: float64(s.LearningRate), ImagesPerSecond: s.ImagesPerSec,
		DeviceMemory: s.DeviceMemory, EpochEnd: s.StepInEpoch == s.StepsPerEpoch,
		SaveBlocked: s.SaveBlocked.Seconds(), SaveWait: s.SaveWait.Seconds(),
	})
}

// eval sends an evaluation on the test split.
func (e *eventWriter) eval(ev trainer.EvalInfo) {
	acc := ev.Accuracy
	e.send(Event{
		Kind: KindEval, Rank: e.rank, Epoch: int64(ev.Epoch), GlobalStep: int64(ev.GlobalStep),
		Accuracy: &acc, Loss: ev.Loss, Final: ev.Final,
	})
}

// fail sends the error the rank is failing with, unless a peer caused it
// (the launcher names the rank at fault) or the launcher stopped the rank.
func (e *eventWriter) fail(err error) {
	var pe *collective.PeerError
	if errors.As(err, &pe) || errors.Is(err, context.Canceled) {
		return
	}
	e.send(Event{Kind: KindFailed, Rank: e.rank, Message: err.Error()})
}

// Write sends each complete line of p as a log event, so that the rank's
// human output can be copied to the stream with an io.MultiWriter.
func (e *eventWriter) Write(p []byte) (int, error) {
	e.mu.Lock()
	e.buf = append(e.buf, p...)
	var lines []string
	for {
		i := bytes.IndexByte(e.buf, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, string(bytes.TrimRight(e.buf[:i], "\r")))
		e.buf = e.buf[i+1:]
	}
	e.mu.Unlock()
	for _, l := range lines {
		e.send(Event{Kind: KindLog, Rank: e.rank, Message: l})
	}
	return len(p), nil
}

func (e *eventWriter) send(ev Event) {
	line, err := json.Marshal(ev)
	for err == nil && len(line)+1 > e.limit && ev.Message != "" {
		// Only a log message can make a line long: shorten it.
		ev.Message = ev.Message[:len(ev.Message)/2] + "…"
		line, err = json.Marshal(ev)
	}
	if err != nil || len(line)+1 > e.limit {
		return
	}
	line = append(line, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return
	}
	if _, err := e.w.Write(line); err != nil {
		e.failed = true
	}
}

// openEventStream returns the rank's end of the event stream, or nil when
// the environment names none (a rank started by hand). A rank that mpirun
// or srun started writes its events, prefixed, on the stdout the launcher
// gave it (launch.Attached.Events), which reaches the stage from any host.
func openEventStream(rank int, att *launch.Attached) (*eventWriter, error) {
	if att != nil {
		e := newEventWriter(att.Events(), rank)
		e.limit -= len(launch.EventPrefix)
		return e, nil
	}
	v := os.Getenv(EnvEventFD)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not an inherited file descriptor", EnvEventFD, v)
	}
	return newEventWriter(os.NewFile(uintptr(fd), "events"), rank), nil
}

// ReadEvents reads the event stream of a job of ranks ranks until EOF or a
// read error, and calls on for each valid event: a known kind from one of
// the job's ranks, a step with positive numbers. A line that is too long
// or not such an event is skipped and reported to warn, a bounded number
// of times. It returns the read error, nil at EOF.
func ReadEvents(r io.Reader, ranks int, on func(Event), warn func(string)) error {
	rd := bufio.NewReaderSize(r, maxEventLine)
	warnings, lineNo := 0, 0
	skip := func(msg string) {
		if warnings++; warnings <= maxEventWarnings {
			warn(fmt.Sprintf("event stream line %d: %s: skipped", lineNo, msg))
		}
	}
	defer func() {
		if warnings > maxEventWarnings {
			warn(fmt.Sprintf("event stream: %d more malformed lines skipped", warnings-maxEventWarnings))
		}
	}()
	tooLong := false
	for {
		line, err := rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !tooLong {
				lineNo++
				skip(fmt.Sprintf("longer than %d bytes", maxEventLine))
			}
			tooLong = true
			continue
		}
		if len(line) > 0 && !tooLong {
			lineNo++
			if ev, ok := parseEvent(bytes.TrimSpace(line), ranks, skip); ok {
				on(ev)
			}
		}
		tooLong = false
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("event stream: %w", err)
		}
	}
}

// parseEvent decodes one line of the stream, or says on skip why it is no
// valid event. An empty line is no event and no problem.
func parseEvent(line []byte, ranks int, skip func(string)) (Event, bool) {
	var ev Event
	if len(line) == 0 {
		return ev, false
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		skip(fmt.Sprintf("not an event: %v", err))
		return ev, false
	}
	if ev.Rank < 0 || ev.Rank >= ranks {
		skip(fmt.Sprintf("rank %d of a job of %d", ev.Rank, ranks))
		return ev, false
	}
	switch ev.Kind {
	case KindLog, KindFailed:
	case KindStep:
		if ev.Epoch < 1 || ev.Step < 1 || ev.GlobalStep < 1 || ev.TotalSteps < 0 {
			skip(fmt.Sprintf("step %d of epoch %d, global step %d of %d: want positive numbers", ev.Step, ev.Epoch, ev.GlobalStep, ev.TotalSteps))
			return ev, false
		}
	case KindEval:
		if ev.Epoch < 1 || ev.GlobalStep < 1 || ev.Accuracy == nil || !(*ev.Accuracy >= 0 && *ev.Accuracy <= 1) {
			skip(fmt.Sprintf("evaluation after epoch %d, global step %d: want positive numbers and an accuracy in [0, 1]", ev.Epoch, ev.GlobalStep))
			return ev, false
		}
	default:
		skip(fmt.Sprintf("unknown kind %q", ev.Kind))
		return ev, false
	}
	return ev, true
}
