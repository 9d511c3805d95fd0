package report

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/pipeline"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func state(order []string, uses map[string]string) *pipeline.RunState {
	created := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	st := &pipeline.RunState{ID: "r1", Pipeline: "p", Status: pipeline.StatusSucceeded, Created: created, Updated: created.Add(time.Minute),
		Order: order, Stages: map[string]*pipeline.StageState{}}
	for _, id := range order {
		st.Stages[id] = &pipeline.StageState{Status: pipeline.StatusSucceeded, Uses: uses[id]}
	}
	return st
}

// The events log of a resumed run repeats steps, holds other events, and
// may end in a line a kill cut short: each rank keeps one value per
// global step (the last), and unreadable step lines are counted.
func TestLoadReadsStepEvents(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "r1")
	writeFile(t, filepath.Join(runDir, "pipeline.yaml"), "version: 1\nname: p\nstages:\n  train: {uses: npu/train}\n")
	writeFile(t, filepath.Join(runDir, "events.jsonl"), strings.Join([]string{
		`{"level":"info","event":"run_started","message":"run started"}`,
		`{"stage":"train","event":"step","rank":0,"epoch":1,"global_step":1,"loss":2.5,"device_memory":100}`,
		`{"stage":"train","event":"step","rank":1,"epoch":1,"global_step":1,"loss":2.5,"device_memory":120}`,
		`{"stage":"train","event":"step","rank":0,"epoch":1,"global_step":2,"loss":2.25,"device_memory":300}`,
		`{"stage":"train","event":"log","level":"info","message":"\"event\":\"step\" in a message is not a step"}`,
		`{"stage":"train","event":"step","rank":0,"epoch":2,"global_step":2,"loss":2.125,"device_memory":200}`,
		`{"stage":"train","event":"step","rank":0,"epoch":2,"global_step":3,"loss":2,"device_me`,
	}, "\n"))
	st := state([]string{"train"}, map[string]string{"train": "npu/train"})
	r, err := Load(context.Background(), filepath.Dir(runDir), runDir, st)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int][]Step{"train": {
		0: {{GlobalStep: 1, Epoch: 1, Loss: 2.5, DeviceMemory: 100}, {GlobalStep: 2, Epoch: 2, Loss: 2.125, DeviceMemory: 200}},
		1: {{GlobalStep: 1, Epoch: 1, Loss: 2.5, DeviceMemory: 120}},
	}}
	if !reflect.DeepEqual(r.Steps, want) {
		t.Errorf("steps\n got %+v\nwant %+v", r.Steps, want)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "1 step lines could not be read") {
		t.Errorf("notes %q, want one about the cut line", r.Notes)
	}
	if !reflect.DeepEqual(r.Needs, map[string][]string{"train": nil}) {
		t.Errorf("needs %v", r.Needs)
	}
	m := memoryChart("train", r.Steps["train"])
	if len(m.Bars) != 2 || m.Bars[0].Bytes != 200 || m.Bars[1].Bytes != 120 || m.Bars[0].W != 400 || m.Bars[1].W != 240 {
		t.Errorf("memory bars %+v, want rank 0 at 200 bytes (400 px), rank 1 at 120 (240 px)", m.Bars)
	}
}

// Paths in run.json are data: a strategy or manifest output that points
// outside the runs directory is not read, and the report says so.
func TestLoadReadsOnlyInsideTheRunsDir(t *testing.T) {
	runsDir := t.TempDir()
	runDir := filepath.Join(runsDir, "r1")
	outside := filepath.Join(t.TempDir(), "strategy.ckpt")
	writeFile(t, outside, `{"current_stage": 0}`)
	writeFile(t, filepath.Join(runDir, "events.jsonl"), "")
	st := state([]string{"train", "reshard"}, map[string]string{"train": "npu/train", "reshard": "ckpt/reshard"})
	st.Stages["train"].Outputs = map[string]any{"strategy": outside}
	st.Stages["reshard"].Outputs = map[string]any{"manifest": filepath.Join(runsDir, "..", "elsewhere", "manifest.json")}
	r, err := Load(context.Background(), runsDir, runDir, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Strategies) != 0 || len(r.Manifests) != 0 {
		t.Errorf("read %d strategies and %d manifests from outside the runs directory", len(r.Strategies), len(r.Manifests))
	}
	all := strings.Join(r.Notes, "\n")
	for _, want := range []string{"stage train: strategy: ", "stage reshard: manifest: ", "outside the directory", "stage graph: "} {
		if !strings.Contains(all, want) {
			t.Errorf("notes lack %q:\n%s", want, all)
		}
	}
}

func TestNiceAxis(t *testing.T) {
	for _, tc := range []struct {
		lo, hi         float64
		wantLo, wantHi float64
		ticks          []float64
	}{
		{0, 10, 0, 10, []float64{0, 2, 4, 6, 8, 10}},
		{1, 78, 0, 80, []float64{0, 20, 40, 60, 80}},
		{2.13, 2.5, 2.1, 2.5, []float64{2.1, 2.2, 2.3, 2.4, 2.5}},
		{3, 3, 2.4, 3.6, []float64{2.4, 2.6, 2.8, 3, 3.2, 3.4, 3.6}}, // a flat curve gets ±0.5 around it
	} {
		lo, hi, ticks := niceAxis(tc.lo, tc.hi)
		if !near(lo, tc.wantLo) || !near(hi, tc.wantHi) || len(ticks) != len(tc.ticks) {
			t.Errorf("niceAxis(%g, %g) = %g, %g, %v; want %g, %g, %v", tc.lo, tc.hi, lo, hi, ticks, tc.wantLo, tc.wantHi, tc.ticks)
			continue
		}
		for i := range ticks {
			if !near(ticks[i], tc.ticks[i]) {
				t.Errorf("niceAxis(%g, %g) ticks %v, want %v", tc.lo, tc.hi, ticks, tc.ticks)
				break
			}
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// The curve's vertices land where the axes say: (0, 1) at the plot's
// bottom-left corner, (10, 2) at its top-right, (5, 1.5) in its middle.
func TestLossChartPlacesPoints(t *testing.T) {
	c := lossChart("s", map[int][]Step{3: {{GlobalStep: 0, Loss: 1}, {GlobalStep: 5, Loss: 1.5}, {GlobalStep: 10, Loss: 2}}})
	if len(c.Series) != 1 {
		t.Fatalf("%d series", len(c.Series))
	}
	s := c.Series[0]
	if s.Points != "60.0,256.0 340.0,136.0 620.0,16.0" || s.N != 3 || s.Rank != 3 || s.Color != palette[3] {
		t.Errorf("series %+v", s)
	}
	if len(c.XTicks) != 6 || c.XTicks[5].Label != "10" || c.XTicks[5].Pos != 620 {
		t.Errorf("x ticks %+v", c.XTicks)
	}
}

func TestThinKeepsEnds(t *testing.T) {
	steps := make([]Step, 2500)
	for i := range steps {
		steps[i].GlobalStep = int64(i + 1)
	}
	got := thin(steps, 1000)
	if len(got) != 1000 || got[0].GlobalStep != 1 || got[999].GlobalStep != 2500 {
		t.Errorf("thin: %d steps from %d to %d", len(got), got[0].GlobalStep, got[len(got)-1].GlobalStep)
	}
}

// Each stage sits in the column of its longest chain of needs.
func TestGraphColumns(t *testing.T) {
	st := state([]string{"a", "b", "c", "d"}, nil)
	g := graph(st, map[string][]string{"b": {"a"}, "c": {"a"}, "d": {"b", "c"}})
	cols := map[string][2]float64{}
	for _, n := range g.Nodes {
		cols[n.ID] = [2]float64{n.X, n.Y}
	}
	want := map[string][2]float64{"a": {10, 10}, "b": {250, 10}, "c": {250, 74}, "d": {490, 10}}
	if !reflect.DeepEqual(cols, want) {
		t.Errorf("node positions %v, want %v", cols, want)
	}
	if len(g.Edges) != 4 {
		t.Errorf("%d edges, want 4", len(g.Edges))
	}
}

// Everything from the run is user data: markup in a stage id, a reason, an
// output or a note comes out as text.
func TestWriteEscapesRunData(t *testing.T) {
	evil := `<script>alert("x")</script>`
	st := state([]string{evil}, map[string]string{evil: "npu/train"})
	st.Pipeline = `<img src=x onerror=alert(1)>`
	st.Error = evil
	st.Stages[evil].Reason = evil
	st.Stages[evil].Outputs = map[string]any{"loss": evil}
	r := &Run{State: st, Needs: map[string][]string{evil: nil},
		Steps: map[string]map[int][]Step{evil: {0: {{GlobalStep: 1, Loss: 2}, {GlobalStep: 2, Loss: 1}}}},
		Notes: []string{evil}}
	var b bytes.Buffer
	if err := Write(&b, r, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	if strings.Contains(html, "<script") || strings.Contains(html, "<img") {
		t.Errorf("markup from the run reached the page:\n%s", html)
	}
	if n := strings.Count(html, "&lt;script&gt;"); n < 6 {
		t.Errorf("the escaped stage id appears %d times, want it in the graph, tables, chart and notes", n)
	}
	if !strings.Contains(html, `<polyline class="curve loss" data-rank="0" data-points="2"`) {
		t.Error("the stage's loss curve is missing")
	}
}

// The note that one curve hides another appears only when two ranks
// reported the same losses, whatever their memory.
func TestTrainingNotesHiddenCurves(t *testing.T) {
	a := []Step{{GlobalStep: 1, Loss: 2, DeviceMemory: 10}, {GlobalStep: 2, Loss: 1.5, DeviceMemory: 10}}
	b := []Step{{GlobalStep: 1, Loss: 2, DeviceMemory: 20}, {GlobalStep: 2, Loss: 1.5, DeviceMemory: 20}}
	c := []Step{{GlobalStep: 1, Loss: 2}, {GlobalStep: 2, Loss: 1.25}}
	if !training("s", map[int][]Step{0: a, 1: b}).Overlap {
		t.Error("equal losses: no overlap noted")
	}
	if training("s", map[int][]Step{0: a, 1: c}).Overlap {
		t.Error("different losses noted as overlapping")
	}
}

// TestMetricsCarryUnits: a stage's results show seconds and bytes with
// their units, and the plain numbers as they are.
func TestMetricsCarryUnits(t *testing.T) {
	ss := &pipeline.StageState{Outputs: map[string]any{
		"loss": 2.1806, "wall_time": 71.0112, "peak_device_memory": float64(469 << 20), "bytes": 2186076, "global_step": 78,
	}}
	got := metrics("train", ss).Outputs
	want := []keyValue{{"loss", "2.1806"}, {"global_step", "78"}, {"peak_device_memory", "469.0 MiB"}, {"wall_time", "71.0 s"}, {"bytes", "2.1 MiB"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("metrics = %v, want %v", got, want)
	}
}
