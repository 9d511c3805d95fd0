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

// Chart is a line chart: one polyline per series inside the plot area,
// vertical markers where a later training stage takes over, and dots for
// values measured once (accuracy after a stage).
type Chart struct {
	Kind          string // loss, accuracy, lr or throughput: the chart's CSS class and what tests look for
	Title         string
	Width, Height float64
	Left, Top     float64 // the plot area's corner
	PlotW, PlotH  float64
	XLabel        string
	YLabel        string
	XTicks        []Tick
	YTicks        []Tick
	Series        []Series
	Boundaries    []Boundary
	// Shrinks mark where an elastic stage went on with fewer devices
	// (loss chart only).
	Shrinks []Boundary
}

// Tick is one labelled position along an axis.
type Tick struct {
	Pos   float64
	Label string
}

// Series is one curve: a run's stage, for a set of ranks that reported
// the same values (drawn once).
type Series struct {
	Label  string
	Stage  string
	Run    string
	Ranks  string // "0-7": the ranks the curve stands for
	Color  string
	Dash   string // stroke-dasharray, "" for a solid line
	Points string // the polyline's points attribute
	N      int    // vertices in Points
	Dots   []Dot
	Last   float64
}

// Dot is one marked value.
type Dot struct {
	X, Y  float64
	Label string
}

// Boundary marks where a stage of a lineage starts on the step axis.
type Boundary struct {
	X     float64
	Label string
}

// curve is a series before it is placed: values against the global step.
type curve struct {
	Label, Stage, Run, Ranks string
	Color, Dash              string
	X, Y                     []float64
	Dots                     bool // draw a dot with its value at each point
}

// boundaryAt is a stage boundary before it is placed.
type boundaryAt struct {
	X     float64
	Label string
}

// chartSize is a chart's size in SVG user units; the legend sits right of
// the plot area, in a Legend-unit margin.
type chartSize struct{ W, H, Legend float64 }

var (
	bigChart   = chartSize{760, 280, 200} // the loss
	smallChart = chartSize{540, 220, 150} // accuracy, learning rate, throughput: two a row
)

// chartSpec says what a chart shows and how its axes are chosen.
type chartSpec struct {
	Kind, Title, YLabel string
	Size                chartSize
	X                   *[2]float64  // a fixed x range (charts of one lineage share it), or nil
	Y                   *[2]float64  // a fixed y range (accuracy is 0..1), or nil
	YFromZero           bool         // the y axis starts at 0 (a rate, a throughput)
	Shrinks             []boundaryAt // shrinks of elastic stages, marked on the step axis
}

// lineChart places curves on one pair of axes. It returns nil when no
// curve has a finite point.
func lineChart(spec chartSpec, curves []curve, bounds []boundaryAt) *Chart {
	size := spec.Size
	c := &Chart{Kind: spec.Kind, Title: spec.Title, Width: size.W, Height: size.H, Left: 60, Top: 22, XLabel: "global step", YLabel: spec.YLabel}
	c.PlotW, c.PlotH = c.Width-c.Left-size.Legend, c.Height-c.Top-44
	xmin, xmax, ymin, ymax, ok := extent(curves)
	if !ok {
		return nil // only NaN or infinite values: nothing to draw
	}
	for _, b := range append(bounds, spec.Shrinks...) {
		xmin, xmax = math.Min(xmin, b.X), math.Max(xmax, b.X)
	}
	if spec.X != nil {
		xmin, xmax = spec.X[0], spec.X[1]
	}
	if spec.YFromZero && ymin >= 0 {
		ymin = 0
	}
	xlo, xhi, xticks := niceAxis(xmin, xmax)
	ylo, yhi, yticks := niceAxis(ymin, ymax)
	if spec.Y != nil {
		ylo, yhi, yticks = spec.Y[0], spec.Y[1], nil
		for i := 0; i <= 4; i++ {
			yticks = append(yticks, ylo+float64(i)*(yhi-ylo)/4)
		}
	}
	xpos := func(v float64) float64 { return c.Left + (v-xlo)/(xhi-xlo)*c.PlotW }
	ypos := func(v float64) float64 { return c.Top + c.PlotH - (clampAxis(v)-ylo)/(yhi-ylo)*c.PlotH }
	for _, t := range xticks {
		c.XTicks = append(c.XTicks, Tick{Pos: xpos(t), Label: formatTick(t)})
	}
	for _, t := range yticks {
		c.YTicks = append(c.YTicks, Tick{Pos: ypos(t), Label: formatTick(t)})
	}
	for _, b := range bounds {
		c.Boundaries = append(c.Boundaries, Boundary{X: xpos(b.X), Label: b.Label})
	}
	for _, b := range spec.Shrinks {
		c.Shrinks = append(c.Shrinks, Boundary{X: xpos(b.X), Label: b.Label})
	}
	for _, cv := range curves {
		sr := Series{Label: cv.Label, Stage: cv.Stage, Run: cv.Run, Ranks: cv.Ranks, Color: cv.Color, Dash: cv.Dash, Last: math.NaN()}
		var b strings.Builder
		for _, i := range thinIndexes(len(cv.X), maxCurvePoints) {
			if !finite(cv.X[i]) || !finite(cv.Y[i]) {
				continue
			}
			x, y := xpos(cv.X[i]), ypos(cv.Y[i])
			if sr.N > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x, y)
			sr.N++
			sr.Last = cv.Y[i]
			if cv.Dots {
				sr.Dots = append(sr.Dots, Dot{X: x, Y: y, Label: strconv.FormatFloat(cv.Y[i], 'f', 3, 64)})
			}
		}
		sr.Points = b.String()
		if sr.N > 0 {
			c.Series = append(c.Series, sr)
		}
	}
	return c
}

// extent is the range of the finite points of curves; ok is false when
// there is none.
func extent(curves []curve) (xmin, xmax, ymin, ymax float64, ok bool) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, cv := range curves {
		for i := range cv.X {
			if !finite(cv.X[i]) || !finite(cv.Y[i]) {
				continue
			}
			xmin, xmax = math.Min(xmin, cv.X[i]), math.Max(xmax, cv.X[i])
			ymin, ymax = math.Min(ymin, cv.Y[i]), math.Max(ymax, cv.Y[i])
		}
	}
	return xmin, xmax, ymin, ymax, !math.IsInf(xmin, 1)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// thinIndexes returns at most max indexes of n, evenly spaced, always the
// first and the last.
func thinIndexes(n, max int) []int {
	out := make([]int, 0, min(n, max))
	if n <= max {
		for i := range n {
			out = append(out, i)
		}
		return out
	}
	for i := range max {
		out = append(out, i*(n-1)/(max-1))
	}
	return out
}

// rankGroup is a set of ranks whose steps are identical (same global
// steps, same values): their curve is drawn once.
type rankGroup struct {
	Ranks []int
	Steps []Step
}

// groupRanks groups the ranks of one stage by identical loss curves, in
// rank order of each group's first rank.
func groupRanks(ranks map[int][]Step) []rankGroup {
	var groups []rankGroup
	index := map[string]int{}
	for _, rank := range sortedRanks(ranks) {
		steps := ranks[rank]
		var kb strings.Builder
		for _, s := range steps {
			fmt.Fprintf(&kb, "%d:%v ", s.GlobalStep, s.Loss)
		}
		key := kb.String()
		if i, ok := index[key]; ok {
			groups[i].Ranks = append(groups[i].Ranks, rank)
			continue
		}
		index[key] = len(groups)
		groups = append(groups, rankGroup{Ranks: []int{rank}, Steps: steps})
	}
	return groups
}

// rankSet names a sorted set of ranks the short way: "0-7", "0-3, 6".
func rankSet(ranks []int) string {
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ranks[i], ranks[j]))
		} else {
			parts = append(parts, strconv.Itoa(ranks[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// rankLabel is rankSet with "rank" or "ranks" before it.
func rankLabel(ranks []int) string {
	if len(ranks) == 1 {
		return "rank " + strconv.Itoa(ranks[0])
	}
	return "ranks " + rankSet(ranks)
}

// thin keeps at most max steps, evenly spaced, always the first and last.
func thin(steps []Step, max int) []Step {
	idx := thinIndexes(len(steps), max)
	out := make([]Step, len(idx))
	for i, j := range idx {
		out[i] = steps[j]
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

// MemoryBar is the largest after-step device memory of one rank, drawn as
// a bar.
type MemoryBar struct {
	Label string
	Bytes int64
	Human string
	Y     float64
	W     float64
	Color string
}

// MemoryChart shows, for each rank of one stage, the most device memory
// in use after a step (the step events' value); the high-water mark
// within a step is the stage's peak_device_memory output.
type MemoryChart struct {
	Stage  string
	Width  float64
	Height float64
	Bars   []MemoryBar
}

// memoryChart draws the largest after-step device memory each rank
// reported; nil when the stage reported none.
func memoryChart(stage string, ranks map[int][]Step) *MemoryChart {
	peaks := map[int]int64{}
	var top int64
	for rank, steps := range ranks {
		for _, s := range steps {
			if s.AfterStepMemory > peaks[rank] {
				peaks[rank] = s.AfterStepMemory
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
