package report

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/pipeline"
)

// The figures are built here as plain values (coordinates already in SVG
// user units) and drawn by the page template, so every label passes
// through html/template's escaping.

// palette colours the ranks' curves; rank i uses palette[i%len(palette)].
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"}

// maxCurvePoints bounds the vertices of one curve: more than a chart is
// pixels wide only makes the file larger.
const maxCurvePoints = 1000

// Chart is a line chart: one polyline per series inside the plot area.
type Chart struct {
	Stage         string
	Width, Height float64
	Left, Top     float64 // the plot area's corner
	PlotW, PlotH  float64
	XLabel        string
	YLabel        string
	XTicks        []Tick
	YTicks        []Tick
	Series        []Series
}

// Tick is one labelled position along an axis.
type Tick struct {
	Pos   float64
	Label string
}

// Series is one rank's curve.
type Series struct {
	Label  string
	Rank   int
	Color  string
	Points string // the polyline's points attribute
	N      int    // vertices in Points
	Last   float64
}

// lossChart draws the loss of every rank of one stage against the global
// step. It returns nil when the stage reported no steps.
func lossChart(stage string, ranks map[int][]Step) *Chart {
	if len(ranks) == 0 {
		return nil
	}
	// The legend sits right of the plot area, in a 100-unit margin.
	c := &Chart{Stage: stage, Width: 720, Height: 300, Left: 60, Top: 16, XLabel: "global step", YLabel: "loss"}
	c.PlotW, c.PlotH = c.Width-c.Left-100, c.Height-c.Top-44
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, steps := range ranks {
		for _, s := range steps {
			if math.IsNaN(s.Loss) || math.IsInf(s.Loss, 0) {
				continue
			}
			xmin, xmax = math.Min(xmin, float64(s.GlobalStep)), math.Max(xmax, float64(s.GlobalStep))
			ymin, ymax = math.Min(ymin, s.Loss), math.Max(ymax, s.Loss)
		}
	}
	if math.IsInf(xmin, 1) {
		return nil // only NaN or infinite losses: nothing to draw
	}
	xlo, xhi, xticks := niceAxis(xmin, xmax)
	ylo, yhi, yticks := niceAxis(ymin, ymax)
	xpos := func(v float64) float64 { return c.Left + (v-xlo)/(xhi-xlo)*c.PlotW }
	ypos := func(v float64) float64 { return c.Top + c.PlotH - (clampAxis(v)-ylo)/(yhi-ylo)*c.PlotH }
	for _, t := range xticks {
		c.XTicks = append(c.XTicks, Tick{Pos: xpos(t), Label: formatTick(t)})
	}
	for _, t := range yticks {
		c.YTicks = append(c.YTicks, Tick{Pos: ypos(t), Label: formatTick(t)})
	}
	for _, rank := range sortedRanks(ranks) {
		steps := thin(ranks[rank], maxCurvePoints)
		var b strings.Builder
		n := 0
		for _, s := range steps {
			if math.IsNaN(s.Loss) || math.IsInf(s.Loss, 0) {
				continue
			}
			if n > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", xpos(float64(s.GlobalStep)), ypos(s.Loss))
			n++
		}
		c.Series = append(c.Series, Series{
			Label: fmt.Sprintf("rank %d", rank), Rank: rank, Color: palette[rank%len(palette)],
			Points: b.String(), N: n, Last: steps[len(steps)-1].Loss,
		})
	}
	return c
}

// thin keeps at most max steps, evenly spaced, always the first and last.
func thin(steps []Step, max int) []Step {
	if len(steps) <= max {
		return steps
	}
	out := make([]Step, 0, max)
	for i := range max {
		out = append(out, steps[i*(len(steps)-1)/(max-1)])
	}
	return out
}

func sortedRanks[T any](m map[int]T) []int {
	out := make([]int, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	sort.Ints(out)
	return out
}

// axisLimit bounds the values an axis spans: anything beyond is drawn at
// the edge. Losses come from plugins and may be as large as a float64
// goes; hi-lo of two such values overflows to +Inf.
const axisLimit = 1e300

// minAxisSpan is the narrowest range an axis shows; narrower ranges
// (subnormal numbers) would make a tick step of zero.
const minAxisSpan = 1e-200

// maxTicks bounds the ticks of one axis whatever the range: a tick step
// that rounds away against the axis's magnitude must not loop.
const maxTicks = 12

// niceAxis widens [lo, hi] to round numbers and returns about five ticks
// on multiples of 1, 2 or 5 times a power of ten. The range is first made
// finite, clamped to ±axisLimit, and at least a billionth of its
// magnitude (and minAxisSpan) wide, so the ticks are distinct numbers and at most maxTicks.
func niceAxis(lo, hi float64) (float64, float64, []float64) {
	lo, hi = clampAxis(lo), clampAxis(hi)
	if hi < lo {
		lo, hi = hi, lo
	}
	if minSpan := math.Max(math.Max(math.Abs(lo), math.Abs(hi))*1e-9, minAxisSpan); hi-lo <= minSpan {
		pad := math.Max(math.Abs(lo)*0.05, 0.5)
		lo, hi = lo-pad, hi+pad
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	lo = math.Floor(lo/step) * step
	hi = math.Ceil(hi/step) * step
	n := max(0, min(int(math.Round((hi-lo)/step)), maxTicks-1))
	ticks := make([]float64, 0, n+1)
	for i := 0; i <= n; i++ {
		ticks = append(ticks, lo+float64(i)*step)
	}
	return lo, hi, ticks
}

// clampAxis maps v into [-axisLimit, axisLimit]; NaN becomes 0.
func clampAxis(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return math.Max(-axisLimit, math.Min(axisLimit, v))
}

func formatTick(v float64) string {
	if math.Abs(v) < 1e-12 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// MemoryBar is one rank's peak device memory, drawn as a bar.
type MemoryBar struct {
	Label string
	Bytes int64
	Human string
	Y     float64
	W     float64
	Color string
}

// MemoryChart shows each rank's peak device memory of one stage.
type MemoryChart struct {
	Stage  string
	Width  float64
	Height float64
	Bars   []MemoryBar
}

// memoryChart draws the largest device_memory each rank reported; nil when
// the stage reported none.
func memoryChart(stage string, ranks map[int][]Step) *MemoryChart {
	peaks := map[int]int64{}
	var top int64
	for rank, steps := range ranks {
		for _, s := range steps {
			if s.DeviceMemory > peaks[rank] {
				peaks[rank] = s.DeviceMemory
			}
		}
		top = max(top, peaks[rank])
	}
	if top == 0 {
		return nil
	}
	const barRow, barMax = 22, 400
	m := &MemoryChart{Stage: stage, Width: 640}
	for i, rank := range sortedRanks(peaks) {
		m.Bars = append(m.Bars, MemoryBar{
			Label: fmt.Sprintf("rank %d", rank), Bytes: peaks[rank], Human: bytesize.Format(peaks[rank]),
			Y: float64(i * barRow), W: math.Max(1, float64(peaks[rank])/float64(top)*barMax),
			Color: palette[rank%len(palette)],
		})
	}
	m.Height = float64(len(m.Bars) * barRow)
	return m
}

// Timeline places each stage's run time on the run's time axis.
type Timeline struct {
	Width, Height float64
	Left          float64
	Rows          []TimelineRow
	Ticks         []Tick
}

// TimelineRow is one stage: a bar from its start to its end, or none
// when it never started.
type TimelineRow struct {
	Stage  string
	Status pipeline.Status
	Y      float64
	X, W   float64
	Drawn  bool
	Label  string // its duration, or why there is no bar
}

// timeline lays the stages out against the run's start. A stage still
// running (or interrupted) ends at the run's last update.
func timeline(st *pipeline.RunState) *Timeline {
	const rowH, labelW, plotW = 26, 150, 440
	t := &Timeline{Width: labelW + plotW + 150, Left: labelW}
	start, end := st.Created, st.Updated
	if st.Finished != nil {
		end = *st.Finished
	}
	for _, sid := range st.Order {
		ss := st.Stages[sid]
		if ss.Finished != nil && ss.Finished.After(end) {
			end = *ss.Finished
		}
	}
	span := end.Sub(start).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(at time.Time) float64 { return labelW + math.Max(0, at.Sub(start).Seconds())/span*plotW }
	for i, sid := range st.Order {
		ss := st.Stages[sid]
		row := TimelineRow{Stage: sid, Status: ss.Status, Y: float64(i * rowH)}
		switch {
		case ss.Started != nil:
			stop := end
			if ss.Finished != nil {
				stop = *ss.Finished
			}
			row.X, row.Drawn = x(*ss.Started), true
			row.W = math.Max(2, x(stop)-row.X)
			row.Label = stop.Sub(*ss.Started).Round(time.Millisecond).String()
		default:
			row.Label = string(ss.Status)
		}
		t.Rows = append(t.Rows, row)
	}
	t.Height = float64(len(t.Rows)*rowH) + 24
	for i := 0; i <= 4; i++ {
		t.Ticks = append(t.Ticks, Tick{Pos: labelW + float64(i)*plotW/4, Label: (time.Duration(float64(i)/4*span*1e9) * time.Nanosecond).Round(100 * time.Millisecond).String()})
	}
	return t
}

// Graph is the stage graph: boxes in columns by depth, arrows for needs.
type Graph struct {
	Width, Height float64
	Nodes         []GraphNode
	Edges         []GraphEdge
}

// GraphNode is one stage's box.
type GraphNode struct {
	ID     string
	Uses   string
	Status pipeline.Status
	X, Y   float64
	W, H   float64
}

// GraphEdge is an arrow from a needed stage to the stage that needs it.
type GraphEdge struct {
	From, To string
	Path     string // the path's d attribute
}

// graph puts each stage in the column of its longest chain of needs, in
// run order within a column. needs may be nil (no edges known).
func graph(st *pipeline.RunState, needs map[string][]string) *Graph {
	const boxW, boxH, colW, rowH, pad = 200, 46, 240, 64, 10
	depth := map[string]int{}
	col := map[int]int{}
	g := &Graph{}
	pos := map[string]*GraphNode{}
	// Order is topological, so a stage's needs have their depth already.
	for _, sid := range st.Order {
		d := 0
		for _, n := range needs[sid] {
			if dn, ok := depth[n]; ok {
				d = max(d, dn+1)
			}
		}
		depth[sid] = d
		ss := st.Stages[sid]
		g.Nodes = append(g.Nodes, GraphNode{
			ID: sid, Uses: ss.Uses, Status: ss.Status,
			X: pad + float64(d*colW), Y: pad + float64(col[d]*rowH), W: boxW, H: boxH,
		})
		col[d]++
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		pos[n.ID] = n
		g.Width = math.Max(g.Width, n.X+n.W+pad)
		g.Height = math.Max(g.Height, n.Y+n.H+pad)
	}
	for _, sid := range st.Order {
		to := pos[sid]
		for _, n := range needs[sid] {
			from, ok := pos[n]
			if !ok {
				continue
			}
			x1, y1 := from.X+from.W, from.Y+from.H/2
			x2, y2 := to.X-2, to.Y+to.H/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, GraphEdge{From: n, To: sid,
				Path: fmt.Sprintf("M%.1f,%.1f C%.1f,%.1f %.1f,%.1f %.1f,%.1f", x1, y1, mid, y1, mid, y2, x2, y2)})
		}
	}
	return g
}
