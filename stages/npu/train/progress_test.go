package train

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Rank 0's LossMonitor lines become progress events over the job's total
// steps (from cifar/prepare's manifest) and loss metrics; other lines do
// not.
func TestLossLinesBecomeProgress(t *testing.T) {
	root := t.TempDir()
	synth := data.SynthConfig{Seed: 3, TrainPerBatch: 20, TestRecords: 10} // 100 train images
	if _, err := data.Prepare(context.Background(), root, data.PrepareOptions{Source: data.SourceSynthetic, Synth: synth}); err != nil {
		t.Fatal(err)
	}
	w := With{Data: filepath.Join(root, "cifar-10-batches-bin"), Mode: "data_parallel", Epochs: 3, BatchSize: 4}
	p := newProgress(w, 8) // 13 images per shard: 3 steps per epoch
	var events []plugins.Event
	sc := sdk.NewContext(plugins.RunRequest{}, func(e plugins.Event) { events = append(events, e) })
	for _, line := range []string{"collective: rank 0 of 8, transport shm", "epoch: 2 step: 1, loss is 2.25", "epoch: 3 step: 3, loss is 1.5"} {
		p.line(sc, line)
	}
	var got []string
	for _, e := range events {
		switch {
		case e.Progress != nil:
			got = append(got, fmt.Sprintf("progress %d/%d %s: %s", e.Progress.Done, e.Progress.Total, e.Progress.Unit, e.Progress.Message))
		case e.Metric != nil:
			got = append(got, fmt.Sprintf("metric %s=%v at %d", e.Metric.Name, e.Metric.Value, e.Metric.Step))
		}
	}
	want := []string{
		"metric loss=2.25 at 4", "progress 4/9 step: epoch 2, loss 2.25",
		"metric loss=1.5 at 9", "progress 9/9 step: epoch 3, loss 1.5",
	}
	if len(got) != len(want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %q, want %q", i, got[i], want[i])
		}
	}

	// Without a manifest the global step is unknown: no events.
	p = newProgress(With{Data: t.TempDir(), Epochs: 3, BatchSize: 4}, 1)
	events = nil
	p.line(sc, "epoch: 2 step: 1, loss is 2.25")
	if len(events) != 0 {
		t.Errorf("without a manifest: events %+v, want none", events)
	}
}

func TestParseMemory(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"", 0, false}, {"32GiB", 32 << 30, false}, {"1.5GiB", 3 << 29, false}, {"512MiB", 512 << 20, false},
		{"1048576", 1 << 20, false}, {"2097152B", 2 << 20, false},
		{"100KiB", 0, true}, {"lots", 0, true}, {"-1GiB", 0, true}, {"32GB", 0, true},
	} {
		got, err := parseMemory(tc.in)
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("parseMemory(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
	problems := check(With{Mode: "stand_alone", DeviceMemory: "lots"})
	if len(problems) != 1 || problems[0].Path != "/device_memory" || !strings.Contains(problems[0].Message, `device memory "lots": want a size`) {
		t.Errorf("check: %+v", problems)
	}
}
