package report

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/parallel"
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
		`{"stage":"train","event":"step","rank":0,"epoch":1,"global_step":1,"loss":2.5,"lr":0.1,"images_per_second":40.5,"device_memory":100}`,
		`{"stage":"train","event":"step","rank":1,"epoch":1,"global_step":1,"loss":2.5,"device_memory":120}`,
		`{"stage":"train","event":"step","rank":0,"epoch":1,"global_step":2,"loss":2.25,"device_memory":300}`,
		`{"stage":"train","event":"log","level":"info","message":"\"event\":\"step\" in a message is not a step"}`,
		`{"stage":"train","event":"step","rank":0,"epoch":2,"global_step":2,"loss":2.125,"after_step_device_memory":200}`,
		`{"stage":"train","event":"step","rank":0,"epoch":2,"global_step":3,"loss":2,"device_me`,
	}, "\n"))
	st := state([]string{"train"}, map[string]string{"train": "npu/train"})
	r, err := Load(context.Background(), filepath.Dir(runDir), runDir, st)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int][]Step{"train": {
		0: {{GlobalStep: 1, Epoch: 1, Loss: 2.5, LearningRate: 0.1, ImagesPerSecond: 40.5, AfterStepMemory: 100}, {GlobalStep: 2, Epoch: 2, Loss: 2.125, AfterStepMemory: 200}},
		1: {{GlobalStep: 1, Epoch: 1, Loss: 2.5, AfterStepMemory: 120}},
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
func TestLineChartPlacesPoints(t *testing.T) {
	cv := curve{Label: "s · rank 3", Stage: "s", Ranks: "3", Color: palette[3], X: []float64{0, 5, 10}, Y: []float64{1, 1.5, 2}}
	c := lineChart(chartSpec{Kind: "loss", Size: bigChart}, []curve{cv}, []boundaryAt{{X: 5, Label: "b"}})
	if len(c.Series) != 1 {
		t.Fatalf("%d series", len(c.Series))
	}
	s := c.Series[0]
	// The plot area is x 60..560 (a 200-unit legend right of it), y 22..236.
	if s.Points != "60.0,236.0 310.0,129.0 560.0,22.0" || s.N != 3 || s.Ranks != "3" {
		t.Errorf("series %+v", s)
	}
	if len(c.XTicks) != 6 || c.XTicks[5].Label != "10" || c.XTicks[5].Pos != 560 {
		t.Errorf("x ticks %+v", c.XTicks)
	}
	if len(c.Boundaries) != 1 || c.Boundaries[0].X != 310 {
		t.Errorf("boundaries %+v, want one at x 310", c.Boundaries)
	}
}

// A lineage is one axis: the retrain continues from the train through
// checkpoint stages, and its steps come after the train's, whether its
// events count on from the train's last step or from 1 again; ranks with
// equal losses are one curve.
func TestLineagesShareTheStepAxis(t *testing.T) {
	for _, restart := range []bool{false, true} {
		st := state([]string{"prepare", "train", "integrate", "reshard", "retrain", "other"}, map[string]string{
			"prepare": "cifar/prepare", "train": "npu/train", "integrate": "ckpt/integrate", "reshard": "ckpt/reshard", "retrain": "npu/train", "other": "npu/train"})
		st.Stages["retrain"].With = map[string]any{"init": "/runs/r1/stages/reshard/checkpoints", "mode": "semi_auto_parallel"}
		st.Stages["reshard"].Outputs = map[string]any{"checkpoints": "/runs/r1/stages/reshard/checkpoints"}
		st.Stages["train"].Outputs = map[string]any{"accuracy": 0.5}
		st.Stages["train"].With = map[string]any{"learning_rate": 0.1}
		st.Stages["retrain"].Outputs = map[string]any{"accuracy": 0.8}
		needs := map[string][]string{"train": {"prepare"}, "integrate": {"train"}, "reshard": {"integrate"}, "retrain": {"reshard"}, "other": {"prepare"}}
		steps := func(from, n int64, loss float64) []Step {
			var out []Step
			for i := range n {
				out = append(out, Step{GlobalStep: from + i, Loss: loss - float64(i)*0.1, LearningRate: 0.1, ImagesPerSecond: 10})
			}
			return out
		}
		retrainFrom := int64(8)
		if restart {
			retrainFrom = 1
		}
		r := &Run{State: st, Needs: needs, Steps: map[string]map[int][]Step{
			"train":   {0: steps(1, 7, 2.3), 1: steps(1, 7, 2.3), 2: steps(1, 7, 2.3)},
			"retrain": {0: steps(retrainFrom, 5, 1.6), 1: steps(retrainFrom, 5, 1.6)},
			"other":   {0: steps(1, 3, 2.3)},
		}}
		r.Continues = continues(st, needs)
		if !reflect.DeepEqual(r.Continues, map[string]string{"retrain": "train"}) {
			t.Fatalf("continues %v, want retrain from train only", r.Continues)
		}
		ls := lineages([]*Run{r})
		if len(ls) != 2 || ls[0].Stages != "train → retrain" || ls[1].Stages != "other" {
			t.Fatalf("lineages %+v", ls)
		}
		loss := ls[0].Loss
		if len(loss.Series) != 2 || loss.Series[0].Label != "train · ranks 0-2" || loss.Series[1].Label != "retrain · ranks 0-1" {
			t.Fatalf("restart %v: series %+v", restart, loss.Series)
		}
		lastTrain := lastX(t, loss.Series[0].Points)
		firstRetrain := firstX(t, loss.Series[1].Points)
		if firstRetrain <= lastTrain {
			t.Errorf("restart %v: the retrain's first vertex (x %.1f) is not right of the train's last (x %.1f)", restart, firstRetrain, lastTrain)
		}
		if len(loss.Boundaries) != 1 || loss.Boundaries[0].Label != "retrain" || loss.Boundaries[0].X <= lastTrain || loss.Boundaries[0].X >= firstRetrain {
			t.Errorf("restart %v: boundaries %+v, want one between x %.1f and %.1f", restart, loss.Boundaries, lastTrain, firstRetrain)
		}
		if got := len(ls[0].Notes) > 0; got != restart {
			t.Errorf("restart %v: notes %q", restart, ls[0].Notes)
		}
		if acc := ls[0].Accuracy; acc == nil || len(acc.Series) != 1 || len(acc.Series[0].Dots) != 2 || acc.Series[0].Dots[1].Label != "0.800" {
			t.Errorf("accuracy chart %+v, want two dots ending at 0.800", acc)
		}
		if sp := ls[0].Speed; sp == nil || sp.Series[0].Last != 30 || sp.Series[1].Last != 20 {
			t.Errorf("throughput: want the ranks' sum (30 for three ranks, 20 for two), got %+v", sp)
		}
		r.Steps["retrain"][0][0].LearningRate = 0.05 // the checkpoint's rate, not the input's
		cfg := configuration(r, false)
		if len(cfg) != 3 || cfg[1].Stage != "retrain" || cfg[1].Init != "stages.reshard.outputs.checkpoints" || cfg[1].Mode != "semi_auto_parallel" ||
			cfg[1].Batch != "32 per device, 64 global" || cfg[1].LR != "0.01 (constant); its first step ran at 0.05" || cfg[0].LR != "0.1 (constant)" {
			t.Errorf("configuration %+v", cfg)
		}
	}
}

func firstX(t *testing.T, points string) float64 {
	t.Helper()
	return pointX(t, strings.Fields(points)[0])
}

func lastX(t *testing.T, points string) float64 {
	t.Helper()
	f := strings.Fields(points)
	return pointX(t, f[len(f)-1])
}

func pointX(t *testing.T, p string) float64 {
	t.Helper()
	x, err := strconv.ParseFloat(strings.SplitN(p, ",", 2)[0], 64)
	if err != nil {
		t.Fatalf("vertex %q: %v", p, err)
	}
	return x
}

// Two runs of one pipeline share the axes: each run's curves are there,
// in the run's colour, and results and stage times sit side by side; runs
// of different pipelines do not compare.
func TestCompareOverlaysRuns(t *testing.T) {
	mk := func(id string, loss float64, acc float64) *Run {
		st := state([]string{"train"}, map[string]string{"train": "npu/train"})
		st.ID = id
		st.Stages["train"].Outputs = map[string]any{"accuracy": acc, "wall_time": 12.5}
		return &Run{State: st, Steps: map[string]map[int][]Step{"train": {0: {{GlobalStep: 1, Loss: loss}, {GlobalStep: 2, Loss: loss - 1}}}}}
	}
	a, b := mk("ra", 2.5, 0.5), mk("rb", 2.0, 0.75)
	var buf bytes.Buffer
	if err := WriteCompare(&buf, []*Run{a, b}, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{
		`<polyline class="curve loss" data-stage="train" data-run="ra" data-ranks="0" data-points="2" stroke="` + palette[0] + `"`,
		`<polyline class="curve loss" data-stage="train" data-run="rb" data-ranks="0" data-points="2" stroke="` + palette[1] + `"`,
		`<th>stage</th><th>output</th><th>ra</th><th>rb</th>`,
		`<td class="mono">train</td><td class="mono">accuracy</td><td class="num">0.5</td><td class="num">0.75</td>`,
		`<td class="mono">train</td><td class="mono">wall_time (s)</td><td class="num">12.5</td><td class="num">12.5</td>`,
		`<h2>Stage times</h2>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("comparison lacks %q", want)
		}
	}
	b.State.Pipeline = "another"
	if err := WriteCompare(&buf, []*Run{a, b}, time.Unix(0, 0)); err == nil || !strings.Contains(err.Error(), "only runs of one pipeline compare") {
		t.Errorf("runs of two pipelines: %v", err)
	}
}

// A strategy's parameters split across devices are listed; the ones every
// device holds whole are folded away, and so are the operators that split
// the batch only.
func TestStrategyMarksSplitTensors(t *testing.T) {
	f := &parallel.StrategyFile{
		Operators: map[string][][]int{"conv1": {{8, 1, 1, 1}, {1, 1, 1, 1}}, "end_point.matmul": {{4, 1}, {2, 1}}, "bias": {{8, 1}, {1}}},
		Layouts: map[string]parallel.TensorLayout{
			"conv1.weight":     {DeviceMatrix: []int{8}, TensorMap: []int{-1, -1, -1, -1}},
			"end_point.weight": {DeviceMatrix: []int{2, 4}, TensorMap: []int{1, -1}, ParamSplitShape: []int{5, 64}},
		},
	}
	v := strategy(StageStrategy{Stage: "train", File: f})
	if len(v.Split) != 1 || v.Split[0].Param != "end_point.weight" || len(v.Whole) != 1 {
		t.Errorf("split %+v, whole %+v", v.Split, v.Whole)
	}
	if len(v.Operators) != 1 || v.Operators[0].Key != "end_point.matmul" || len(v.BatchOnly) != 2 {
		t.Errorf("operators %+v, batch only %+v", v.Operators, v.BatchOnly)
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
	if !strings.Contains(html, `<polyline class="curve loss" data-stage="&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" data-run="r1" data-ranks="0" data-points="2"`) {
		t.Error("the stage's loss curve is missing")
	}
}

// Ranks that reported the same losses are one curve, whatever their
// memory; a rank with other losses is a curve of its own.
func TestGroupRanksDrawsEqualCurvesOnce(t *testing.T) {
	a := []Step{{GlobalStep: 1, Loss: 2, AfterStepMemory: 10}, {GlobalStep: 2, Loss: 1.5, AfterStepMemory: 10}}
	b := []Step{{GlobalStep: 1, Loss: 2, AfterStepMemory: 20}, {GlobalStep: 2, Loss: 1.5, AfterStepMemory: 20}}
	c := []Step{{GlobalStep: 1, Loss: 2}, {GlobalStep: 2, Loss: 1.25}}
	g := groupRanks(map[int][]Step{0: a, 1: b, 2: c, 3: a, 5: b})
	if len(g) != 2 || rankLabel(g[0].Ranks) != "ranks 0-1, 3, 5" || rankLabel(g[1].Ranks) != "rank 2" {
		t.Errorf("groups %+v", g)
	}
}

// TestMetricsCarryUnits: a stage's results show seconds and bytes with
// their units, and the plain numbers as they are.
func TestMetricsCarryUnits(t *testing.T) {
	run := &Run{State: &pipeline.RunState{ID: "r1", Order: []string{"train"}, Stages: map[string]*pipeline.StageState{
		"train": {Outputs: map[string]any{
			"loss": 2.1806, "wall_time": 71.0112, "peak_device_memory": float64(469 << 20), "bytes": 2186076, "global_step": 78,
		}},
	}}}
	got := results([]*Run{run}).Rows
	want := [][]string{
		{"train", "loss", "2.1806"},
		{"train", "global_step", "78"},
		{"train", "peak_device_memory (high-water mark)", "469.0 MiB"},
		{"train", "wall_time (s)", "71.0112"},
		{"train", "bytes", "2.1 MiB"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("results = %v, want %v", got, want)
	}
}

// The evaluations a training stage reports after each epoch (its
// eval_accuracy and eval_loss metrics) are read by global step, other
// metrics passed over, and drawn as one dot each on the loss chart's
// global-step axis.
func TestAccuracyPerEpoch(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "r1")
	writeFile(t, filepath.Join(runDir, "pipeline.yaml"), "version: 1\nname: p\nstages:\n  train: {uses: npu/train}\n")
	lines := []string{}
	for g := 1; g <= 8; g++ {
		lines = append(lines, `{"stage":"train","event":"step","rank":0,"epoch":`+strconv.Itoa((g+3)/4)+`,"global_step":`+strconv.Itoa(g)+`,"loss":2}`)
	}
	lines = append(lines,
		`{"stage":"train","event":"metric","name":"eval_accuracy","value":0.25,"step":4}`,
		`{"stage":"train","event":"metric","name":"eval_loss","value":1.5,"step":4}`,
		`{"stage":"train","event":"metric","name":"loss","value":2,"step":4}`,
		`{"stage":"train","event":"metric","name":"eval_loss","value":1.25,"step":8}`,
		`{"stage":"train","event":"metric","name":"eval_accuracy","value":0,"step":8}`,
		`{"stage":"train","event":"metric","name":"eval_accuracy","value":0.5,"step":0}`,
	)
	writeFile(t, filepath.Join(runDir, "events.jsonl"), strings.Join(lines, "\n"))
	st := state([]string{"train"}, map[string]string{"train": "npu/train"})
	st.Stages["train"].Outputs = map[string]any{"accuracy": 0.0}
	r, err := Load(context.Background(), filepath.Dir(runDir), runDir, st)
	if err != nil {
		t.Fatal(err)
	}
	want := []Eval{{GlobalStep: 4, Accuracy: 0.25, Loss: 1.5}, {GlobalStep: 8, Accuracy: 0, Loss: 1.25}}
	if !reflect.DeepEqual(r.Evals["train"], want) {
		t.Fatalf("evaluations %+v, want %+v", r.Evals["train"], want)
	}
	ls := lineages([]*Run{r})
	acc, loss := ls[0].Accuracy, ls[0].Loss
	if acc == nil || acc.Title != "held-out accuracy after each epoch" || len(acc.Series) != 1 || len(acc.Series[0].Dots) != 2 ||
		acc.Series[0].Dots[0].Label != "0.250" || acc.Series[0].Dots[1].Label != "0.000" {
		t.Fatalf("accuracy chart %+v, want two dots, 0.250 and 0.000", acc)
	}
	// Step 4 is vertex 4 of the loss curve: both sit at the same fraction
	// of their plots' widths.
	lossX := pointX(t, strings.Fields(loss.Series[0].Points)[3])
	if got, want := (acc.Series[0].Dots[0].X-acc.Left)/acc.PlotW, (lossX-loss.Left)/loss.PlotW; got-want > 1e-3 || want-got > 1e-3 {
		t.Errorf("the evaluation after step 4 sits at %.4f of the accuracy axis, the step's loss at %.4f", got, want)
	}
}

// An elastic stage's shrink record (npu/train's on_failure: shrink, a log
// line with elastic: shrink) is read from the events log, marked on the
// loss chart after the step training resumed from, and listed in the
// stage's section; the new job's steps continue the curve.
func TestShrinkIsMarkedAndListed(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "r1")
	writeFile(t, filepath.Join(runDir, "pipeline.yaml"), "version: 1\nname: p\nstages:\n  train: {uses: npu/train}\n")
	var lines []string
	for g := 1; g <= 5; g++ { // the 8-device job, lost after step 5
		lines = append(lines, `{"stage":"train","event":"step","rank":5,"epoch":1,"global_step":`+strconv.Itoa(g)+`,"loss":2}`)
	}
	lines = append(lines, `{"level":"info","stage":"train","event":"log","record":"shrink","failed_step":5,"from_devices":8,"from_layout":"semi_auto_parallel on 8 devices, batch 2 per device","lost_rank":5,"resumed_step":4,"seconds_lost":2.25,"shrink":1,"steps_redone":1,"to_devices":4,"to_layout":"semi_auto_parallel on 4 devices, batch 4 per device","message":"shrink 1: rank 5 lost"}`)
	for g := 5; g <= 10; g++ { // the 4-device job
		lines = append(lines, `{"stage":"train","event":"step","rank":0,"epoch":2,"global_step":`+strconv.Itoa(g)+`,"loss":1}`)
	}
	writeFile(t, filepath.Join(runDir, "events.jsonl"), strings.Join(lines, "\n"))
	st := state([]string{"train"}, map[string]string{"train": "npu/train"})
	r, err := Load(context.Background(), filepath.Dir(runDir), runDir, st)
	if err != nil {
		t.Fatal(err)
	}
	want := []Shrink{{Generation: 1, LostRank: 5, ResumedStep: 4, FailedStep: 5, FromDevices: 8, ToDevices: 4,
		FromLayout: "semi_auto_parallel on 8 devices, batch 2 per device", ToLayout: "semi_auto_parallel on 4 devices, batch 4 per device",
		StepsRedone: 1, SecondsLost: 2.25}}
	if !reflect.DeepEqual(r.Shrinks["train"], want) {
		t.Fatalf("shrinks %+v, want %+v", r.Shrinks["train"], want)
	}
	loss := lineages([]*Run{r})[0].Loss
	if len(loss.Shrinks) != 1 || loss.Shrinks[0].Label != "8 → 4 devices" {
		t.Fatalf("loss chart shrinks %+v", loss.Shrinks)
	}
	// Halfway between steps 4 and 5 of the axis.
	var at4, at5 float64
	for _, s := range loss.Series {
		for _, p := range strings.Fields(s.Points) {
			switch x := pointX(t, p); {
			case strings.Contains(s.Ranks, "5") && at4 == 0 && p == strings.Fields(s.Points)[3]:
				at4 = x
			case s.Ranks == "0" && at5 == 0:
				at5 = x
			}
		}
	}
	if got := loss.Shrinks[0].X; at4 == 0 || at5 == 0 || got-(at4+at5)/2 > 0.1 || (at4+at5)/2-got > 0.1 {
		t.Errorf("shrink marked at x %.1f, want halfway between step 4 (%.1f) and step 5 (%.1f)", got, at4, at5)
	}
	var b bytes.Buffer
	if err := Write(&b, r, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, s := range []string{
		`<text class="shrink"`, `shrink: 8 → 4 devices</text>`,
		`<table class="shrinks">`,
		`<tr><td class="num">1</td><td class="num">5</td><td class="num">5</td><td class="num">4</td><td class="num">1</td><td>semi_auto_parallel on 8 devices, batch 2 per device</td><td>semi_auto_parallel on 4 devices, batch 4 per device</td><td class="num">2.2s</td></tr>`,
	} {
		if !strings.Contains(html, s) {
			t.Errorf("the report lacks %q", s)
		}
	}
}
