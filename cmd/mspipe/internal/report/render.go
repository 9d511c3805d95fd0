package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/pipeline"
)

//go:embed report.html.tmpl
var pageSource string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"time":  formatTime,
	"ints":  formatInts[int],
	"bytes": bytesize.Format,
	"g6":    func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) },
	"add":   func(a, b float64) float64 { return a + b },
	"mul16": func(i int) float64 { return float64(16 * i) },
}).Parse(pageSource))

// view is what the page template reads.
type view struct {
	Run        *pipeline.RunState
	Duration   string
	Params     []keyValue
	Stages     []stageView
	Graph      *Graph
	Timeline   *Timeline
	Training   []trainingView
	Metrics    []metricsRow
	Strategies []strategyView
	Manifests  []StageManifest
	Notes      []string
	Generated  string
}

type keyValue struct{ Key, Value string }

type stageView struct {
	ID       string
	S        *pipeline.StageState
	Duration string
	Needs    string
}

type trainingView struct {
	Stage   string
	Loss    *Chart
	Memory  *MemoryChart
	Ranks   []rankRow
	Overlap bool // two ranks reported the same losses: one curve hides the other
}

// rankRow summarises one rank of a training stage.
type rankRow struct {
	Rank      int
	Steps     int
	FirstLoss float64
	LastLoss  float64
	Peak      string
}

type metricsRow struct {
	Stage   string
	Outputs []keyValue
}

type strategyView struct {
	Stage     string
	Path      string
	Operators []keyValue
	Layouts   []layoutRow
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
	v := build(r, generated)
	var buf bytes.Buffer
	if err := page.Execute(&buf, v); err != nil {
		return fmt.Errorf("render report: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func build(r *Run, generated time.Time) *view {
	st := r.State
	v := &view{Run: st, Notes: r.Notes, Manifests: r.Manifests, Generated: formatTime(generated)}
	if st.Finished != nil {
		v.Duration = st.Finished.Sub(st.Created).Round(time.Millisecond).String()
	}
	for _, k := range slices.Sorted(maps.Keys(st.Params)) {
		v.Params = append(v.Params, keyValue{k, fmt.Sprint(st.Params[k])})
	}
	for _, sid := range st.Order {
		ss := st.Stages[sid]
		sv := stageView{ID: sid, S: ss, Needs: strings.Join(r.Needs[sid], ", ")}
		if ss.Started != nil && ss.Finished != nil {
			sv.Duration = ss.Finished.Sub(*ss.Started).Round(time.Millisecond).String()
		}
		v.Stages = append(v.Stages, sv)
		if row := metrics(sid, ss); len(row.Outputs) > 0 {
			v.Metrics = append(v.Metrics, row)
		}
		if ranks := r.Steps[sid]; len(ranks) > 0 {
			v.Training = append(v.Training, training(sid, ranks))
		}
	}
	v.Graph = graph(st, r.Needs)
	v.Timeline = timeline(st)
	for _, s := range r.Strategies {
		v.Strategies = append(v.Strategies, strategy(s))
	}
	return v
}

// metricOutputs are the outputs shown as a stage's results, in this order.
var metricOutputs = []string{"loss", "accuracy", "global_step", "images_per_second", "peak_device_memory", "wall_time", "tensors", "bytes", "devices"}

func metrics(sid string, ss *pipeline.StageState) metricsRow {
	row := metricsRow{Stage: sid}
	for _, k := range metricOutputs {
		val, ok := ss.Outputs[k]
		if !ok {
			continue
		}
		s := fmt.Sprint(val)
		switch x := val.(type) {
		case float64:
			s = strconv.FormatFloat(x, 'g', 6, 64)
			if k == "peak_device_memory" {
				s = bytesize.Format(int64(x))
			}
		case int:
			if k == "peak_device_memory" || k == "bytes" {
				s = bytesize.Format(int64(x))
			}
		}
		row.Outputs = append(row.Outputs, keyValue{k, s})
	}
	return row
}

func training(sid string, ranks map[int][]Step) trainingView {
	t := trainingView{Stage: sid, Loss: lossChart(sid, ranks), Memory: memoryChart(sid, ranks)}
	seen := map[string]bool{}
	for _, rank := range sortedRanks(ranks) {
		steps := ranks[rank]
		var kb strings.Builder
		for _, s := range steps {
			fmt.Fprintf(&kb, "%d:%v ", s.GlobalStep, s.Loss)
		}
		key := kb.String()
		t.Overlap = t.Overlap || seen[key]
		seen[key] = true
		var peak int64
		for _, s := range steps {
			peak = max(peak, s.DeviceMemory)
		}
		t.Ranks = append(t.Ranks, rankRow{
			Rank: rank, Steps: len(steps), FirstLoss: steps[0].Loss, LastLoss: steps[len(steps)-1].Loss, Peak: bytesize.Format(peak),
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
		v.Operators = append(v.Operators, keyValue{op, "[" + strings.Join(parts, ", ") + "]"})
	}
	for _, p := range slices.Sorted(maps.Keys(s.File.Layouts)) {
		l := s.File.Layouts[p]
		row := layoutRow{Param: p, DeviceMatrix: formatInts(l.DeviceMatrix), TensorMap: formatInts(l.TensorMap)}
		if len(l.ParamSplitShape) > 0 {
			row.SplitShape = formatInts(l.ParamSplitShape)
		}
		v.Layouts = append(v.Layouts, row)
	}
	return v
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
