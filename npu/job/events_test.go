package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/trainer"
)

// read returns the events and warnings ReadEvents finds in stream, as
// short strings.
func read(t *testing.T, stream io.Reader, ranks int) (events, warnings []string) {
	t.Helper()
	err := ReadEvents(stream, ranks, func(ev Event) {
		events = append(events, fmt.Sprintf("%s rank %d epoch %d step %d global %d/%d loss %v lr %v ips %v mem %d end %v %q",
			ev.Kind, ev.Rank, ev.Epoch, ev.Step, ev.GlobalStep, ev.TotalSteps, ev.Loss, ev.LearningRate, ev.ImagesPerSecond, ev.DeviceMemory, ev.EpochEnd, ev.Message))
	}, func(msg string) { warnings = append(warnings, msg) })
	if err != nil {
		t.Fatal(err)
	}
	return events, warnings
}

// What ranks write is what the reader gets: printed lines as log events
// (whole lines only), finished steps with their figures.
func TestEventStreamRoundTrip(t *testing.T) {
	var pipe bytes.Buffer
	r0, r1 := newEventWriter(&pipe, 0), newEventWriter(&pipe, 1)
	fmt.Fprintf(r0, "collective: rank 0 of 2, transport shm\nepoch: 1 ")
	r1.step(trainer.StepInfo{Epoch: 1, StepInEpoch: 3, StepsPerEpoch: 3, GlobalStep: 3, TotalSteps: 6, Loss: 2.25, LearningRate: 0.01, ImagesPerSec: 80, DeviceMemory: 1 << 20})
	fmt.Fprintf(r0, "step: 3, loss is 2.0084016\n")
	r0.step(trainer.StepInfo{Epoch: 2, StepInEpoch: 1, StepsPerEpoch: 3, GlobalStep: 4, TotalSteps: 6, Loss: 2.0084016, LearningRate: 0.005, ImagesPerSec: 75.5, DeviceMemory: 2 << 20})
	events, warnings := read(t, &pipe, 2)
	loss := float64(float32(2.0084016)) // the trainer's float32, widened
	want := []string{
		`log rank 0 epoch 0 step 0 global 0/0 loss 0 lr 0 ips 0 mem 0 end false "collective: rank 0 of 2, transport shm"`,
		fmt.Sprintf(`step rank 1 epoch 1 step 3 global 3/6 loss 2.25 lr %v ips 80 mem 1048576 end true ""`, float64(float32(0.01))),
		`log rank 0 epoch 0 step 0 global 0/0 loss 0 lr 0 ips 0 mem 0 end false "epoch: 1 step: 3, loss is 2.0084016"`,
		fmt.Sprintf(`step rank 0 epoch 2 step 1 global 4/6 loss %v lr %v ips 75.5 mem 2097152 end false ""`, loss, float64(float32(0.005))),
	}
	if strings.Join(events, "\n") != strings.Join(want, "\n") || len(warnings) != 0 {
		t.Errorf("read\n%s\nwant\n%s\nwarnings %v", strings.Join(events, "\n"), strings.Join(want, "\n"), warnings)
	}
}

// Malformed lines are skipped with a bounded number of warnings; the lines
// around them still arrive.
func TestReadEventsSkipsMalformedLines(t *testing.T) {
	good := `{"kind":"log","rank":0,"message":"ok"}`
	lines := []string{
		good,
		`{"kind":"log","rank":0,"message":` + strings.Repeat("x", maxEventLine) + `}`, // too long
		`not json`,
		`{"kind":"step","rank":5,"epoch":1,"step":1,"global_step":1}`,
		`{"kind":"step","rank":0,"epoch":0,"step":1,"global_step":1}`,
		`{"kind":"shout","rank":0}`,
		`{"kind":"log","rank":0,"message":"x","extra":1}`,
		`{"kind":"log","rank":0,"message":"x"`,
		good,
	}
	events, warnings := read(t, strings.NewReader(strings.Join(lines, "\n")), 2)
	if len(events) != 2 || !strings.HasSuffix(events[0], `"ok"`) || events[1] != events[0] {
		t.Errorf("events %v, want the two good lines", events)
	}
	want := []string{
		fmt.Sprintf("event stream line 2: longer than %d bytes: skipped", maxEventLine),
		"event stream line 3: not an event: invalid character 'o' in literal null (expecting 'u'): skipped",
		"event stream line 4: rank 5 of a job of 2: skipped",
		"event stream line 5: step 1 of epoch 0, global step 1 of 0: want positive numbers: skipped",
		`event stream line 6: unknown kind "shout": skipped`,
		"event stream: 2 more malformed lines skipped",
	}
	if strings.Join(warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings\n%s\nwant\n%s", strings.Join(warnings, "\n"), strings.Join(want, "\n"))
	}
}

// A line is one write of at most PIPE_BUF bytes, so ranks sharing the pipe
// never interleave: a long message is shortened to fit.
func TestEventWriterKeepsLinesAtomic(t *testing.T) {
	var writes []int
	w := newEventWriter(writerFunc(func(p []byte) (int, error) {
		writes = append(writes, len(p))
		var ev Event
		if err := json.Unmarshal(p, &ev); err != nil || p[len(p)-1] != '\n' {
			t.Errorf("write %q: %v", p[:min(len(p), 40)], err)
		}
		return len(p), nil
	}), 0)
	fmt.Fprintln(w, strings.Repeat("é", 10000))
	fmt.Fprintln(w, "short")
	if len(writes) != 2 || writes[0] > maxEventWrite {
		t.Errorf("writes of %v bytes, want 2 of at most %d", writes, maxEventWrite)
	}
	// After a failed write (the stage is gone) nothing more is written.
	calls := 0
	w = newEventWriter(writerFunc(func([]byte) (int, error) { calls++; return 0, io.ErrClosedPipe }), 0)
	fmt.Fprintln(w, "a")
	fmt.Fprintln(w, "b")
	if calls != 1 {
		t.Errorf("%d writes after a failure, want 1", calls)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The event stream's descriptor comes only from the environment the stage
// gives its ranks: a worker started any other way writes no events, and a
// bad value is refused rather than taken as some open file. (It once came
// from worker.json, and a worker run in a test process wrote to, and
// closed, whatever that process had open as fd 3.)
func TestEventStreamOnlyFromTheEnvironment(t *testing.T) {
	t.Setenv(EnvEventFD, "")
	if w, err := openEventStream(0, nil); w != nil || err != nil {
		t.Errorf("no %s: got %v, %v; want no stream", EnvEventFD, w, err)
	}
	for _, bad := range []string{"x", "-1", "0", "2"} {
		t.Setenv(EnvEventFD, bad)
		if _, err := openEventStream(0, nil); err == nil || !strings.Contains(err.Error(), "not an inherited file descriptor") {
			t.Errorf("%s=%s: err %v", EnvEventFD, bad, err)
		}
	}
}

// A rank's own failure reaches the stage through the stream; a failure a
// peer caused, or the launcher's stop, does not (the launcher names the
// rank at fault).
func TestFailuresTravelOnTheStream(t *testing.T) {
	var pipe bytes.Buffer
	r0, r1, r2 := newEventWriter(&pipe, 0), newEventWriter(&pipe, 1), newEventWriter(&pipe, 2)
	r0.fail(fmt.Errorf("gradient allreduce: %w", &collective.PeerError{Op: "allreduce", Rank: 1, Err: collective.ErrPeerClosed, Via: -1}))
	r1.fail(errors.New("write checkpoint ckpt_1/CKP-1_10.ckpt: no space left on device"))
	r2.fail(fmt.Errorf("train: %w", context.Canceled))
	events, warnings := read(t, &pipe, 3)
	want := `failed rank 1 epoch 0 step 0 global 0/0 loss 0 lr 0 ips 0 mem 0 end false "write checkpoint ckpt_1/CKP-1_10.ckpt: no space left on device"`
	if len(events) != 1 || events[0] != want || len(warnings) != 0 {
		t.Errorf("events %v (warnings %v), want\n%s", events, warnings, want)
	}
}

// An evaluation arrives with its accuracy, 0 included (a pointer, so it
// is not left out of the line); one without an accuracy in [0, 1] or at
// no global step is skipped with a warning.
func TestEvalEvents(t *testing.T) {
	var pipe bytes.Buffer
	w := newEventWriter(&pipe, 0)
	w.eval(trainer.EvalInfo{Epoch: 1, GlobalStep: 5, Accuracy: 0, Loss: 2.5})
	w.eval(trainer.EvalInfo{Epoch: 2, GlobalStep: 10, Accuracy: 0.75, Loss: 0.5, Final: true})
	pipe.WriteString(`{"kind":"eval","rank":0,"epoch":1,"global_step":5,"loss":1}` + "\n")
	pipe.WriteString(`{"kind":"eval","rank":0,"epoch":1,"global_step":5,"accuracy":1.5}` + "\n")
	pipe.WriteString(`{"kind":"eval","rank":0,"epoch":1,"accuracy":0.5}` + "\n")
	var got []string
	err := ReadEvents(&pipe, 1, func(ev Event) {
		got = append(got, fmt.Sprintf("epoch %d global %d accuracy %v loss %v final %v", ev.Epoch, ev.GlobalStep, *ev.Accuracy, ev.Loss, ev.Final))
	}, func(msg string) { got = append(got, "warning") })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"epoch 1 global 5 accuracy 0 loss 2.5 final false", "epoch 2 global 10 accuracy 0.75 loss 0.5 final true", "warning", "warning", "warning"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
