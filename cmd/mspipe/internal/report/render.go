package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mspipe/mspipe/internal/bytesize"
	"github.com/mspipe/mspipe/npu/trainer"
	"github.com/mspipe/mspipe/pipeline"
)

//go:embed report.html.tmpl
var pageSource string

// page is the report's template, parsed on first use: parsing it at
// package initialisation cost every mspipe process about 1 ms of CPU,
// stage plugins (the mspipe binary re-executed) included.
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"time":  formatTime,
		"ints":  formatInts[int],
		"bytes": bytesize.Format,
		"g6":    func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) },
		"add":   func(a, b float64) float64 { return a + b },
		"mul16": func(i int) float64 { return float64(16 * i) },
	}).Parse(pageSource))
})

// view is what the page template reads. One run fills every section; a
// comparison of several runs (Compare) fills Runs, Config, Lineages,
// StageTimes and Results.
type view struct {
	Compare    bool
	Run        *pipeline.RunState // the first run
	Runs       []runView
	Duration   string
	Params     []keyValue
	Config     []configRow
	Stages     []stageView
	Graph      *Graph
	Timeline   *Timeline
	Lineages   []lineageView
	Training   []trainingView
	Results    table
	StageTimes table
	Strategies []strategyView
	Manifests  []StageManifest
	Notes      []string
	Generated  string
}

type keyValue struct{ Key, Value string }

// runView is one run of a comparison.
type runView struct {
	ID, Color, Status string
	Created           string
	Duration          string
	Params            string
}

type stageView struct {
	ID       string
	S        *pipeline.StageState
	Duration string
	Needs    string
	StepsOf  string // the run whose steps a cached stage shows
}

// configRow is the configuration of one training stage.
type configRow struct {
	Run, Stage              string
	Model, Mode, Strategy   string
	Devices                 string
	Batch, LR, Epochs, Init string
	Defaults                []string // the settings above that are defaults, not in the spec
}

// lineageView is one training lineage: a stage and the stages that
// continue from its checkpoints, on one global-step axis.
type lineageView struct {
	Title    string
	Stages   string
	Loss     *Chart
	Accuracy *Chart
	LR       *Chart
	Speed    *Chart
	Notes    []string
}

type trainingView struct {
	Stage   string
	Shrinks []shrinkRow // an elastic stage's shrinks
	StepsOf string
	Memory  *MemoryChart
	Peak    string // the stage's peak_device_memory output: the high-water mark
	Ranks   []rankRow
	Groups  int // distinct loss curves among the ranks
}

// shrinkRow is one shrink of an elastic stage, as the stage's section
// lists it.
type shrinkRow struct {
	Shrink
	Lost string // the wall time lost, readable
}

// rankRow summarises one rank of a training stage.
type rankRow struct {
	Rank         int
	Steps        int
	FirstLoss    float64
	LastLoss     float64
	AfterStepMax string
}

// table is a grid of text: the first column names the row.
type table struct {
	Head []string
	Rows [][]string
}

type strategyView struct {
	Stage     string
	Path      string
	Operators []keyValue  // operators split some other way than by the batch
	BatchOnly []keyValue  // operators that only split the batch (data parallel)
	Split     []layoutRow // parameters split across devices
	Whole     []layoutRow // parameters every device holds whole
}

type layoutRow struct {
	Param        string
	DeviceMatrix string
	TensorMap    string
	SplitShape   string
}

// Write renders r as one HTML page. generated is the time the report was
// made, shown in its footer.
func Write(w io.Writer, r *Run, generated time.Time) error {
	return WriteCompare(w, []*Run{r}, generated)
}

// WriteCompare renders one page for runs: one run as Write does, several
// side by side (their curves overlaid on shared axes). Runs compared must
// be of the same pipeline.
func WriteCompare(w io.Writer, runs []*Run, generated time.Time) error {
	if len(runs) == 0 {
		return fmt.Errorf("render report: no run")
	}
	for _, r := range runs[1:] {
		if r.State.Pipeline != runs[0].State.Pipeline {
			return fmt.Errorf("render report: run %s is of pipeline %q and run %s of %q: only runs of one pipeline compare",
				runs[0].State.ID, runs[0].State.Pipeline, r.State.ID, r.State.Pipeline)
		}
	}
	v := build(runs, generated)
	var buf bytes.Buffer
	if err := page().Execute(&buf, v); err != nil {
		return fmt.Errorf("render report: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func build(runs []*Run, generated time.Time) *view {
	r := runs[0]
	st := r.State
	v := &view{Compare: len(runs) > 1, Run: st, Generated: formatTime(generated)}
	if st.Finished != nil {
		v.Duration = st.Finished.Sub(st.Created).Round(time.Millisecond).String()
	}
	for _, k := range slices.Sorted(maps.Keys(st.Params)) {
		v.Params = append(v.Params, keyValue{k, fmt.Sprint(st.Params[k])})
	}
	for i, run := range runs {
		rv := runView{ID: run.State.ID, Color: palette[i%len(palette)], Status: string(run.State.Status), Created: formatTime(run.State.Created)}
		if run.State.Finished != nil {
			rv.Duration = run.State.Finished.Sub(run.State.Created).Round(time.Millisecond).String()
		}
		var ps []string
		for _, k := range slices.Sorted(maps.Keys(run.State.Params)) {
			ps = append(ps, fmt.Sprintf("%s=%v", k, run.State.Params[k]))
		}
		rv.Params = strings.Join(ps, ", ")
		v.Runs = append(v.Runs, rv)
		v.Config = append(v.Config, configuration(run, v.Compare)...)
		for _, n := range run.Notes {
			if v.Compare {
				n = "run " + run.State.ID + ": " + n
			}
			v.Notes = append(v.Notes, n)
		}
	}
	v.Lineages = lineages(runs)
	v.Results = results(runs)
	v.StageTimes = stageTimes(runs)
	if v.Compare {
		return v
	}
	v.Manifests = r.Manifests
	for _, sid := range st.Order {
		ss := st.Stages[sid]
		sv := stageView{ID: sid, S: ss, Needs: strings.Join(r.Needs[sid], ", "), StepsOf: r.StepsFrom[sid]}
		if ss.Started != nil && ss.Finished != nil {
			sv.Duration = ss.Finished.Sub(*ss.Started).Round(time.Millisecond).String()
		}
		v.Stages = append(v.Stages, sv)
		if ranks := r.Steps[sid]; len(ranks) > 0 {
			v.Training = append(v.Training, training(sid, ss, ranks, r.StepsFrom[sid], r.Shrinks[sid]))
		}
	}
	v.Graph = graph(st, r.Needs)
	v.Timeline = timeline(st)
	for _, s := range r.Strategies {
		v.Strategies = append(v.Strategies, strategy(s))
	}
	return v
}

// configuration lists the settings of each training stage of run: what
// its resolved with says, and the trainer's default for what it leaves
// out (marked as such).
func configuration(r *Run, withRun bool) []configRow {
	d := trainer.Defaults()
	var out []configRow
	for _, sid := range r.State.Order {
		ss := r.State.Stages[sid]
		if ss.Uses != "npu/train" {
			continue
		}
		row := configRow{Stage: sid}
		if withRun {
			row.Run = r.State.ID
		}
		get := func(key string, def any) string {
			if val, ok := ss.With[key]; ok && val != nil && val != "" {
				return formatValue(val)
			}
			if def == nil {
				return ""
			}
			row.Defaults = append(row.Defaults, key)
			return formatValue(def)
		}
		row.Model = get("model", d.Model)
		row.Mode = get("mode", "stand_alone")
		row.Strategy = get("strategy", nil)
		row.Epochs = get("epochs", d.Epochs)
		row.LR = get("learning_rate", d.LearningRate) + " (" + get("lr_schedule", d.Schedule) + ")"
		if ranks := r.Steps[sid]; len(ranks) > 0 {
			// A stage that starts from a checkpoint may run at the rate
			// the checkpoint holds: say what the steps report.
			first := ranks[sortedRanks(ranks)[0]][0].LearningRate
			if want, err := strconv.ParseFloat(strings.Fields(row.LR)[0], 64); err == nil && first > 0 && math.Abs(first-want) > 1e-6*want {
				row.LR += fmt.Sprintf("; its first step ran at %s", strconv.FormatFloat(float64(float32(first)), 'g', -1, 32))
			}
		}
		row.Init = outputName(r.State, get("init", nil))
		batch := get("batch_size", d.BatchSize)
		if n := len(r.Steps[sid]); n > 0 {
			row.Devices = strconv.Itoa(n)
			if b, err := strconv.Atoi(batch); err == nil && n > 1 && ss.With["full_batch"] != true {
				batch = fmt.Sprintf("%s per device, %d global", batch, b*n)
			}
		} else if ss.Status == pipeline.StatusSkipped {
			row.Devices = "(skipped)"
		}
		row.Batch = batch
		if ss.With == nil {
			row.Defaults = nil // never resolved: nothing is known
		}
		out = append(out, row)
	}
	return out
}

// outputName names a resolved input by the stage output it came from
// (stages.reshard.outputs.checkpoints) when one has that value: a path
// under the run directory says less.
func outputName(st *pipeline.RunState, value string) string {
	if value == "" {
		return ""
	}
	for _, sid := range st.Order {
		outs := st.Stages[sid].Outputs
		for _, k := range slices.Sorted(maps.Keys(outs)) {
			if s, ok := outs[k].(string); ok && s == value {
				return "stages." + sid + ".outputs." + k
			}
		}
	}
	return value
}

// formatValue writes a resolved input the way a spec would: maps and
// lists in flow style, sorted keys.
func formatValue(v any) string {
	switch x := v.(type) {
	case map[string]any:
		parts := make([]string, 0, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, k+": "+formatValue(x[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = formatValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// lineages draws, for each training lineage (a stage and the stages that
// continue from it), loss, learning rate, throughput and accuracy against
// the global step, every run of runs on the same axes.
func lineages(runs []*Run) []lineageView {
	type member struct {
		run    int
		stage  string
		offset int64
	}
	// Lineages by their root stage, in the first run's order; the same
	// pipeline gives every run the same lineages.
	var roots []string
	byRoot := map[string][]member{}
	for ri, r := range runs {
		lastStep := map[string]int64{}
		for _, sid := range r.State.Order {
			if len(r.Steps[sid]) == 0 {
				continue
			}
			root, parent := sid, ""
			for p, ok := r.Continues[root]; ok; p, ok = r.Continues[root] {
				if parent == "" {
					parent = p
				}
				root = p
			}
			m := member{run: ri, stage: sid}
			first, last := stepRange(r.Steps[sid])
			if pl, ok := lastStep[parent]; ok && first <= pl {
				// The stage counted its steps from 1 again: place them
				// after the stage it continues.
				m.offset = pl - first + 1
			}
			lastStep[sid] = last + m.offset
			if _, ok := byRoot[root]; !ok {
				roots = append(roots, root)
			}
			byRoot[root] = append(byRoot[root], m)
		}
	}
	var out []lineageView
	for _, root := range roots {
		members := byRoot[root]
		lv := lineageView{Title: root}
		var stages []string
		var loss, lr, speed, acc []curve
		var bounds, shrinks []boundaryAt
		accByRun := map[int]*curve{}
		perEpoch := false // some stage reported an evaluation per epoch
		for _, m := range members {
			r := runs[m.run]
			if !slices.Contains(stages, m.stage) {
				stages = append(stages, m.stage)
			}
			color := func(i int) string {
				if len(runs) > 1 {
					return palette[m.run%len(palette)]
				}
				return palette[i%len(palette)]
			}
			prefix := m.stage
			if len(runs) > 1 {
				prefix = r.State.ID + " · " + m.stage
			}
			groups := groupRanks(r.Steps[m.stage])
			for gi, g := range groups {
				cv := curve{Label: prefix + " · " + rankLabel(g.Ranks), Stage: m.stage, Run: r.State.ID, Ranks: rankSet(g.Ranks), Color: color(len(loss))}
				if len(runs) > 1 && gi > 0 {
					cv.Dash = "4 3"
				}
				for _, s := range g.Steps {
					cv.X = append(cv.X, float64(s.GlobalStep+m.offset))
					cv.Y = append(cv.Y, s.Loss)
				}
				loss = append(loss, cv)
			}
			lead := r.Steps[m.stage][sortedRanks(r.Steps[m.stage])[0]]
			lc := curve{Label: prefix, Stage: m.stage, Run: r.State.ID, Color: color(len(lr))}
			for _, s := range lead {
				lc.X = append(lc.X, float64(s.GlobalStep+m.offset))
				lc.Y = append(lc.Y, s.LearningRate)
			}
			lr = append(lr, lc)
			speed = append(speed, throughput(prefix, m.stage, r.State.ID, color(len(speed)), r.Steps[m.stage], m.offset))
			first, last := stepRange(r.Steps[m.stage])
			if _, parent := r.Continues[m.stage]; parent && (m.run == 0 || len(runs) == 1) {
				bounds = append(bounds, boundaryAt{X: float64(first+m.offset) - 0.5, Label: m.stage})
			}
			if m.run == 0 || len(runs) == 1 {
				for _, sh := range r.Shrinks[m.stage] {
					// After the step resumed from: the new job's first
					// step is the next.
					shrinks = append(shrinks, boundaryAt{X: float64(sh.ResumedStep+m.offset) + 0.5,
						Label: fmt.Sprintf("%d → %d devices", sh.FromDevices, sh.ToDevices)})
				}
			}
			if m.offset != 0 {
				lv.Notes = append(lv.Notes, fmt.Sprintf("%sstage %s counted its steps from %d again; they are drawn after the stage it continues (+%d)",
					runPrefix(runs, r), m.stage, first, m.offset))
			}
			// Accuracy after each epoch (the stage's eval events), or
			// after the stage (its accuracy output) in a run without them.
			evals := r.Evals[m.stage]
			if len(evals) > 0 {
				perEpoch = true
			} else if a, ok := r.State.Stages[m.stage].Outputs["accuracy"].(float64); ok && a >= 0 {
				evals = []Eval{{GlobalStep: last, Accuracy: a}}
			}
			if len(evals) > 0 {
				c := accByRun[m.run]
				if c == nil {
					c = &curve{Label: r.State.ID, Run: r.State.ID, Color: palette[m.run%len(palette)], Dots: true}
					accByRun[m.run] = c
				}
				for _, e := range evals {
					c.X = append(c.X, float64(e.GlobalStep+m.offset))
					c.Y = append(c.Y, e.Accuracy)
				}
			}
		}
		accTitle := "held-out accuracy after each training stage"
		if perEpoch {
			accTitle = "held-out accuracy after each epoch"
		}
		for ri := range runs {
			if c := accByRun[ri]; c != nil {
				if len(runs) == 1 {
					c.Label = strings.TrimPrefix(accTitle, "held-out accuracy ")
				}
				acc = append(acc, *c)
			}
		}
		lv.Stages = strings.Join(stages, " → ")
		var xr *[2]float64
		if xmin, xmax, _, _, ok := extent(loss); ok {
			xr = &[2]float64{min(xmin, 0), xmax}
		}
		lv.Loss = lineChart(chartSpec{Kind: "loss", Title: "loss", YLabel: "loss", Size: bigChart, X: xr, Shrinks: shrinks}, loss, bounds)
		lv.Accuracy = lineChart(chartSpec{Kind: "accuracy", Title: accTitle, YLabel: "accuracy",
			Size: smallChart, X: xr, Y: &[2]float64{0, 1}}, acc, bounds)
		lv.LR = lineChart(chartSpec{Kind: "lr", Title: "learning rate", YLabel: "learning rate", Size: smallChart, X: xr, YFromZero: true}, lr, bounds)
		lv.Speed = lineChart(chartSpec{Kind: "throughput", Title: "images per second, all ranks", YLabel: "images/s", Size: smallChart, X: xr, YFromZero: true}, speed, bounds)
		out = append(out, lv)
	}
	return out
}

func runPrefix(runs []*Run, r *Run) string {
	if len(runs) > 1 {
		return "run " + r.State.ID + ": "
	}
	return ""
}

// stepRange is the first and last global step any rank reported.
func stepRange(ranks map[int][]Step) (first, last int64) {
	first = -1
	for _, steps := range ranks {
		if len(steps) == 0 {
			continue
		}
		if first < 0 || steps[0].GlobalStep < first {
			first = steps[0].GlobalStep
		}
		last = max(last, steps[len(steps)-1].GlobalStep)
	}
	return max(first, 0), last
}

// throughput sums the ranks' images per second at each global step: the
// stage's throughput on all its devices.
func throughput(label, stage, run, color string, ranks map[int][]Step, offset int64) curve {
	sum := map[int64]float64{}
	for _, steps := range ranks {
		for _, s := range steps {
			sum[s.GlobalStep] += s.ImagesPerSecond
		}
	}
	c := curve{Label: label, Stage: stage, Run: run, Color: color}
	for _, g := range slices.Sorted(maps.Keys(sum)) {
		c.X = append(c.X, float64(g+offset))
		c.Y = append(c.Y, sum[g])
	}
	return c
}

// metricOutputs are the outputs shown as a stage's results, in this order.
var metricOutputs = []string{"loss", "accuracy", "global_step", "images_per_second", "peak_device_memory", "wall_time", "tensors", "bytes", "devices"}

// results is one row per stage and result output, one column per run.
func results(runs []*Run) table {
	t := table{Head: []string{"stage", "output"}}
	for _, r := range runs {
		t.Head = append(t.Head, r.State.ID)
	}
	if len(runs) == 1 {
		t.Head = t.Head[:2]
		t.Head = append(t.Head, "value")
	}
	for _, sid := range runs[0].State.Order {
		for _, k := range metricOutputs {
			row := []string{sid, outputLabel(k)}
			found := false
			for _, r := range runs {
				cell := ""
				if ss := r.State.Stages[sid]; ss != nil {
					if val, ok := ss.Outputs[k]; ok {
						cell, found = formatOutput(k, val), true
					}
				}
				row = append(row, cell)
			}
			if found {
				t.Rows = append(t.Rows, row)
			}
		}
	}
	return t
}

// outputLabel names an output with its unit where it has one.
func outputLabel(k string) string {
	switch k {
	case "wall_time":
		return "wall_time (s)"
	case "peak_device_memory":
		return "peak_device_memory (high-water mark)"
	}
	return k
}

func formatOutput(k string, val any) string {
	switch x := val.(type) {
	case float64:
		if k == "peak_device_memory" || k == "bytes" {
			return bytesize.Format(int64(x))
		}
		return strconv.FormatFloat(x, 'g', 6, 64)
	case int:
		if k == "peak_device_memory" || k == "bytes" {
			return bytesize.Format(int64(x))
		}
	}
	return fmt.Sprint(val)
}

// stageTimes is one row per stage, one column per run: its status and
// how long it took.
func stageTimes(runs []*Run) table {
	t := table{Head: []string{"stage"}}
	for _, r := range runs {
		t.Head = append(t.Head, r.State.ID)
	}
	for _, sid := range runs[0].State.Order {
		row := []string{sid}
		for _, r := range runs {
			cell := ""
			if ss := r.State.Stages[sid]; ss != nil {
				cell = string(ss.Status)
				if ss.Started != nil && ss.Finished != nil {
					cell += " " + ss.Finished.Sub(*ss.Started).Round(100*time.Millisecond).String()
				}
			}
			row = append(row, cell)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func training(sid string, ss *pipeline.StageState, ranks map[int][]Step, stepsOf string, shrinks []Shrink) trainingView {
	t := trainingView{Stage: sid, StepsOf: stepsOf, Memory: memoryChart(sid, ranks), Groups: len(groupRanks(ranks))}
	for _, sh := range shrinks {
		t.Shrinks = append(t.Shrinks, shrinkRow{Shrink: sh, Lost: (time.Duration(sh.SecondsLost*10) * time.Second / 10).String()})
	}
	if val, ok := ss.Outputs["peak_device_memory"]; ok {
		t.Peak = formatOutput("peak_device_memory", val)
	}
	for _, rank := range sortedRanks(ranks) {
		steps := ranks[rank]
		var most int64
		for _, s := range steps {
			most = max(most, s.AfterStepMemory)
		}
		t.Ranks = append(t.Ranks, rankRow{
			Rank: rank, Steps: len(steps), FirstLoss: steps[0].Loss, LastLoss: steps[len(steps)-1].Loss, AfterStepMax: bytesize.Format(most),
		})
	}
	return t
}

func strategy(s StageStrategy) strategyView {
	v := strategyView{Stage: s.Stage, Path: s.Path}
	for _, op := range slices.Sorted(maps.Keys(s.File.Operators)) {
		parts := make([]string, len(s.File.Operators[op]))
		for i, in := range s.File.Operators[op] {
			parts[i] = formatInts(in)
		}
		kv := keyValue{op, "[" + strings.Join(parts, ", ") + "]"}
		if batchOnly(s.File.Operators[op]) {
			v.BatchOnly = append(v.BatchOnly, kv)
		} else {
			v.Operators = append(v.Operators, kv)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(s.File.Layouts)) {
		l := s.File.Layouts[p]
		row := layoutRow{Param: p, DeviceMatrix: formatInts(l.DeviceMatrix), TensorMap: formatInts(l.TensorMap)}
		if len(l.ParamSplitShape) > 0 {
			row.SplitShape = formatInts(l.ParamSplitShape)
		}
		// A parameter is split when some dimension maps to a device
		// axis; the rest (most of a semi-auto network) are whole on
		// every device.
		if slices.ContainsFunc(l.TensorMap, func(m int) bool { return m >= 0 }) {
			v.Split = append(v.Split, row)
		} else {
			v.Whole = append(v.Whole, row)
		}
	}
	return v
}

// batchOnly reports whether an operator's strategy splits nothing but
// the batch: every input split along its first dimension only, by one
// count (or not at all), as data parallel does.
func batchOnly(inputs [][]int) bool {
	n := 1
	for _, in := range inputs {
		for i, d := range in {
			switch {
			case d == 1:
			case i > 0:
				return false
			case n != 1 && d != n:
				return false
			default:
				n = d
			}
		}
	}
	return true
}

func formatInts[T int | int64](xs []T) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatInt(int64(x), 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func formatTime(t any) string {
	switch x := t.(type) {
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05 UTC")
	case *time.Time:
		if x == nil {
			return "-"
		}
		return x.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return fmt.Sprint(t)
}
