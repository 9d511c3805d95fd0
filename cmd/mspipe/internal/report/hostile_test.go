package report

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Losses come from plugins: values as large as a float64 goes, subnormal
// ones and ranges narrower than the magnitude's precision must give an
// axis of a few distinct, finite ticks (the old code allocated without end
// for ±1e308 and looped for [1e15, 1e15+1e-3]).
func TestNiceAxisHostileRanges(t *testing.T) {
	for _, r := range [][2]float64{
		{-1e308, 1e308}, {-math.MaxFloat64, math.MaxFloat64}, {math.Inf(-1), math.Inf(1)},
		{math.NaN(), 1}, {1e308, 1e308}, {1e15, 1e15 + 1e-3}, {5e-324, 1e-323}, {1e-310, 2e-310},
		{0, 0}, {-9.2e18, 9.2e18}, {1e300, -1e300},
	} {
		lo, hi, ticks := niceAxis(r[0], r[1])
		if math.IsNaN(lo) || math.IsInf(lo, 0) || math.IsNaN(hi) || math.IsInf(hi, 0) || !(lo < hi) {
			t.Errorf("niceAxis(%g, %g) = [%g, %g], want a finite range", r[0], r[1], lo, hi)
		}
		if len(ticks) < 2 || len(ticks) > maxTicks {
			t.Errorf("niceAxis(%g, %g): %d ticks, want 2..%d", r[0], r[1], len(ticks), maxTicks)
			continue
		}
		for i, v := range ticks {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi || i > 0 && !(v > ticks[i-1]) {
				t.Errorf("niceAxis(%g, %g): ticks %v are not increasing inside [%g, %g]", r[0], r[1], ticks, lo, hi)
				break
			}
		}
	}
}

// A run whose plugin reported ±1e308, NaN and ±Inf losses (zerolog writes
// the last three as strings) is reported: the non-finite steps are read and
// listed, the curve keeps the finite ones inside the plot area.
func TestReportOfHostileLosses(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "r1")
	writeFile(t, filepath.Join(runDir, "pipeline.yaml"), "version: 1\nname: p\nstages:\n  train: {uses: npu/train}\n")
	writeFile(t, filepath.Join(runDir, "events.jsonl"), strings.Join([]string{
		`{"stage":"train","event":"step","rank":0,"global_step":1,"loss":1e308}`,
		`{"stage":"train","event":"step","rank":0,"global_step":2,"loss":-1e308}`,
		`{"stage":"train","event":"step","rank":0,"global_step":3,"loss":"NaN"}`,
		`{"stage":"train","event":"step","rank":0,"global_step":4,"loss":"+Inf"}`,
		`{"stage":"train","event":"step","rank":1,"global_step":9223372036854775807,"loss":"-Inf"}`,
		`{"stage":"train","event":"step","rank":1,"global_step":5,"loss":"Infinity"}`,
	}, "\n"))
	st := state([]string{"train"}, map[string]string{"train": "npu/train"})
	r, err := Load(context.Background(), filepath.Dir(runDir), runDir, st)
	if err != nil {
		t.Fatal(err)
	}
	if n0, n1 := len(r.Steps["train"][0]), len(r.Steps["train"][1]); n0 != 4 || n1 != 1 {
		t.Fatalf("read %d and %d steps for ranks 0 and 1, want 4 and 1", n0, n1)
	}
	if l := r.Steps["train"][0][2].Loss; !math.IsNaN(l) {
		t.Errorf("step 3's loss read as %g, want NaN", l)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "1 step lines could not be read") {
		t.Errorf("notes %q, want one about the \"Infinity\" line", r.Notes)
	}
	c := lossChart("train", r.Steps["train"])
	if len(c.YTicks) > maxTicks || len(c.XTicks) > maxTicks {
		t.Errorf("%d y ticks and %d x ticks, want at most %d", len(c.YTicks), len(c.XTicks), maxTicks)
	}
	top, bottom := fmt.Sprintf(",%.1f", c.Top), fmt.Sprintf(",%.1f", c.Top+c.PlotH)
	if pts := strings.Fields(c.Series[0].Points); c.Series[0].N != 2 || len(pts) != 2 || !strings.HasSuffix(pts[0], top) || !strings.HasSuffix(pts[1], bottom) {
		t.Errorf("rank 0's curve %q (%d points), want ±1e308 at the plot's top (y %s) and bottom (y %s)", c.Series[0].Points, c.Series[0].N, top, bottom)
	}
	var b bytes.Buffer
	if err := Write(&b, r, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if b.Len() > 1<<20 {
		t.Errorf("the page is %d bytes", b.Len())
	}
}

// lossChart draws one stage's steps as the report's loss chart does: one
// curve per group of ranks that reported equal losses.
func lossChart(stage string, ranks map[int][]Step) *Chart {
	var curves []curve
	for _, g := range groupRanks(ranks) {
		cv := curve{Label: rankLabel(g.Ranks), Stage: stage}
		for _, st := range g.Steps {
			cv.X = append(cv.X, float64(st.GlobalStep))
			cv.Y = append(cv.Y, st.Loss)
		}
		curves = append(curves, cv)
	}
	return lineChart(chartSpec{Kind: "loss", Title: "loss", YLabel: "loss", Size: bigChart}, curves, nil)
}
