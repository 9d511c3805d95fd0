package train

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

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

// The stage relays the lead rank's printed lines as log records, every
// rank's steps as step events, and the lead rank's loss as a metric. The
// lead is rank 0 or, when rank 0 runs on another server, this host's
// first.
func TestRelayEvents(t *testing.T) {
	stream := strings.Join([]string{
		`{"kind":"log","rank":0,"message":"collective: rank 0 of 2, transport shm"}`,
		`{"kind":"step","rank":1,"epoch":1,"step":3,"global_step":3,"total_steps":6,"loss":2.25,"lr":0.01,"images_per_second":80,"device_memory":1048576,"epoch_end":true}`,
		`{"kind":"log","rank":1,"message":"rank 1 talks too"}`,
		`{"kind":"step","rank":0,"epoch":2,"step":1,"global_step":4,"total_steps":6,"loss":2.5,"lr":0.005,"images_per_second":75.5,"device_memory":2097152}`,
	}, "\n")
	for _, tc := range []struct {
		lead int
		want []string
	}{
		{0, []string{
			"info collective: rank 0 of 2, transport shm",
			"step rank 1 epoch 1 step 3 global 3/6 loss 2.25 lr 0.01 ips 80 mem 1048576 end true",
			"metric loss=2.5 at 4",
			"step rank 0 epoch 2 step 1 global 4/6 loss 2.5 lr 0.005 ips 75.5 mem 2097152 end false",
		}},
		{1, []string{
			"metric loss=2.25 at 3",
			"step rank 1 epoch 1 step 3 global 3/6 loss 2.25 lr 0.01 ips 80 mem 1048576 end true",
			"info rank 1 talks too",
			"step rank 0 epoch 2 step 1 global 4/6 loss 2.5 lr 0.005 ips 75.5 mem 2097152 end false",
		}},
	} {
		sc, got := collect()
		if err := relayEvents(strings.NewReader(stream), sc, 2, tc.lead, nil); err != nil {
			t.Fatal(err)
		}
		if strings.Join(*got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("lead %d: relayed\n%s\nwant\n%s", tc.lead, strings.Join(*got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
	// A malformed line becomes a warning (which ones: npu/job's
	// TestReadEventsSkipsMalformedLines).
	sc, got := collect()
	if err := relayEvents(strings.NewReader("not json\n"), sc, 2, 0, nil); err != nil || len(*got) != 1 || !strings.HasPrefix((*got)[0], "warn event stream line 1: not an event") {
		t.Errorf("malformed line: %v, %v", *got, err)
	}
}

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
		if warnings > 6 {
			t.Errorf("%d warnings", warnings)
		}
	})
}

// A rank's failure on the stream becomes part of the stage's error (which
// failures a rank sends is npu/job's TestFailuresTravelOnTheStream), and
// no log record or step.
func TestFailuresTravelOnTheStream(t *testing.T) {
	pipe := strings.NewReader(`{"kind":"failed","rank":1,"message":"write checkpoint ckpt_1/CKP-1_10.ckpt: no space left on device"}` + "\n")
	sc, got := collect()
	failures := map[int]string{}
	if err := relayEvents(pipe, sc, 3, 0, failures); err != nil {
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
