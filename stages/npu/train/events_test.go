package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// collect returns a Context that records events as short strings.
func collect() (sdk.Context, *[]string) {
	var got []string
	sc := sdk.NewContext(plugins.RunRequest{}, func(e plugins.Event) {
		switch {
		case e.Log != nil:
			got = append(got, fmt.Sprintf("%s %s", e.Log.Level, e.Log.Message))
		case e.Metric != nil:
			got = append(got, fmt.Sprintf("metric %s=%v at %d", e.Metric.Name, e.Metric.Value, e.Metric.Step))
		case e.Step != nil:
			s := e.Step
			got = append(got, fmt.Sprintf("step rank %d epoch %d step %d global %d/%d loss %v lr %v ips %v mem %d end %v",
				s.Rank, s.Epoch, s.Step, s.GlobalStep, s.TotalSteps, s.Loss, s.LearningRate, s.ImagesPerSecond, s.DeviceMemory, s.EpochEnd))
		default:
			got = append(got, fmt.Sprintf("other %+v", e))
		}
	})
	return sc, &got
}

// What ranks write is what the stage relays: rank 0's printed lines as
// log records, every rank's steps as step events, rank 0's loss as a
// metric.
func TestEventStreamRoundTrip(t *testing.T) {
	var pipe bytes.Buffer
	r0, r1 := newEventWriter(&pipe, 0), newEventWriter(&pipe, 1)
	fmt.Fprintf(r0, "collective: rank 0 of 2, transport shm\nepoch: 1 ")
	r1.step(trainer.StepInfo{Epoch: 1, StepInEpoch: 3, StepsPerEpoch: 3, GlobalStep: 3, TotalSteps: 6, Loss: 2.25, LearningRate: 0.01, ImagesPerSec: 80, DeviceMemory: 1 << 20})
	fmt.Fprintf(r0, "step: 3, loss is 2.0084016\n")
	r0.step(trainer.StepInfo{Epoch: 2, StepInEpoch: 1, StepsPerEpoch: 3, GlobalStep: 4, TotalSteps: 6, Loss: 2.0084016, LearningRate: 0.005, ImagesPerSec: 75.5, DeviceMemory: 2 << 20})
	fmt.Fprintf(r1, "rank 1 talks too\n")

	sc, got := collect()
	if err := relayEvents(&pipe, sc, 2, 0, nil); err != nil {
		t.Fatal(err)
	}
	loss := float64(float32(2.0084016)) // the trainer's float32, widened
	want := []string{
		"info collective: rank 0 of 2, transport shm",
		fmt.Sprintf("step rank 1 epoch 1 step 3 global 3/6 loss 2.25 lr %v ips 80 mem 1048576 end true", float64(float32(0.01))),
		"info epoch: 1 step: 3, loss is 2.0084016",
		fmt.Sprintf("metric loss=%v at 4", loss),
		fmt.Sprintf("step rank 0 epoch 2 step 1 global 4/6 loss %v lr %v ips 75.5 mem 2097152 end false", loss, float64(float32(0.005))),
	}
	if strings.Join(*got, "\n") != strings.Join(want, "\n") {
		t.Errorf("relayed\n%s\nwant\n%s", strings.Join(*got, "\n"), strings.Join(want, "\n"))
	}
}

// Malformed lines are skipped with a bounded number of warnings; the lines
// around them still arrive.
func TestEventStreamSkipsMalformedLines(t *testing.T) {
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
	sc, got := collect()
	if err := relayEvents(strings.NewReader(strings.Join(lines, "\n")), sc, 2, 0, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"info ok",
		fmt.Sprintf("warn event stream line 2: longer than %d bytes: skipped", maxEventLine),
		"warn event stream line 3: not an event: invalid character 'o' in literal null (expecting 'u'): skipped",
		"warn event stream line 4: rank 5 of a job of 2: skipped",
		"warn event stream line 5: step 1 of epoch 0, global step 1 of 0: want positive numbers: skipped",
		`warn event stream line 6: unknown kind "shout": skipped`,
		"info ok",
		"warn event stream: 2 more malformed lines skipped",
	}
	if strings.Join(*got, "\n") != strings.Join(want, "\n") {
		t.Errorf("relayed\n%s\nwant\n%s", strings.Join(*got, "\n"), strings.Join(want, "\n"))
	}
}

// A line is one write of at most PIPE_BUF bytes, so ranks sharing the pipe
// never interleave: a long message is shortened to fit.
func TestEventWriterKeepsLinesAtomic(t *testing.T) {
	var writes []int
	w := newEventWriter(writerFunc(func(p []byte) (int, error) {
		writes = append(writes, len(p))
		var ev workerEvent
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

// Whatever arrives on the stream, relaying it never panics, warns a
// bounded number of times and relays only valid events.
func FuzzRelayEvents(f *testing.F) {
	f.Add([]byte(`{"kind":"log","rank":0,"message":"epoch: 1 step: 1, loss is 2.5"}` + "\n"))
	f.Add([]byte(`{"kind":"step","rank":1,"epoch":1,"step":2,"global_step":2,"total_steps":4,"loss":1.5}` + "\n{"))
	f.Add([]byte("\n\n{\"kind\":\"step\",\"rank\":-1}\nnull\n[]\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		warnings := 0
		sc := sdk.NewContext(plugins.RunRequest{}, func(e plugins.Event) {
			switch {
			case e.Log != nil && e.Log.Level == plugins.LevelWarn:
				warnings++
			case e.Step != nil && (e.Step.Rank < 0 || e.Step.Rank >= 2 || e.Step.GlobalStep < 1):
				t.Errorf("relayed an invalid step %+v", e.Step)
			}
		})
		if err := relayEvents(bytes.NewReader(stream), sc, 2, 0, nil); err != nil {
			t.Fatal(err)
		}
		if warnings > maxEventWarnings+1 {
			t.Errorf("%d warnings", warnings)
		}
	})
}

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
// rank at fault), and neither becomes a log record or a step.
func TestFailuresTravelOnTheStream(t *testing.T) {
	var pipe bytes.Buffer
	r0, r1, r2 := newEventWriter(&pipe, 0), newEventWriter(&pipe, 1), newEventWriter(&pipe, 2)
	r0.fail(fmt.Errorf("gradient allreduce: %w", &collective.PeerError{Op: "allreduce", Rank: 1, Err: collective.ErrPeerClosed, Via: -1}))
	r1.fail(errors.New("write checkpoint ckpt_1/CKP-1_10.ckpt: no space left on device"))
	r2.fail(fmt.Errorf("train: %w", context.Canceled))
	sc, got := collect()
	failures := map[int]string{}
	if err := relayEvents(&pipe, sc, 3, 0, failures); err != nil {
		t.Fatal(err)
	}
	want := map[int]string{1: "write checkpoint ckpt_1/CKP-1_10.ckpt: no space left on device"}
	if !maps.Equal(failures, want) {
		t.Errorf("failures %v, want %v", failures, want)
	}
	if len(*got) != 0 {
		t.Errorf("relayed %v, want nothing", *got)
	}
	err := withReportedFailures(errors.New("rank failed: rank 1 (device 1) exit status 1"), failures)
	if want := "rank failed: rank 1 (device 1) exit status 1; failed ranks reported: rank 1: write checkpoint ckpt_1/CKP-1_10.ckpt: no space left on device"; err.Error() != want {
		t.Errorf("stage error %q, want %q", err, want)
	}
	// When the log tail quotes a report, the cause is known: nothing is
	// added, not even the reports of other ranks (on a full disk, every
	// rank fails the same way).
	failures[2] = "write checkpoint ckpt_2/CKP-1_10.ckpt: no space left on device"
	quoted := errors.New("rank failed: rank 2 (device 2) exit status 1: mspipe: " + failures[2])
	if err := withReportedFailures(quoted, failures); err != quoted {
		t.Errorf("with the cause quoted from a log, reports were added: %q", err)
	}
}
