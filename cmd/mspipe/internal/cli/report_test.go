package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/internal/testutil/browser"
)

// tinySpec trains a CNN on two simulated devices twice, data parallel and
// semi-auto parallel (with a strategy file as output), on a few synthetic
// images, two epochs each (so each evaluates after its first epoch too),
// integrates the semi-auto stage's slices (a reshard manifest) and
// retrains from the integrated checkpoint: semi → integrate → retrain is
// one lineage, dp another.
const tinySpec = `version: 1
name: tiny-report
cluster: {devices: 2}
stages:
  prepare: {uses: cifar/prepare, with: {source: synthetic, train_images: 128, test_images: 32, shards: 2}}
  dp:
    uses: npu/train
    needs: [prepare]
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, epochs: 2, batch_size: 8, log_steps: 1}
  semi:
    uses: npu/train
    needs: [prepare]
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      model: cnn
      mode: semi_auto_parallel
      strategy: {end_point.matmul: [[1, 1], [2, 1]]}
      integrated_save: false
      epochs: 2
      batch_size: 8
      log_steps: 1
  integrate: {uses: ckpt/integrate, needs: [semi], with: {from: "${{ stages.semi.outputs.checkpoints }}"}}
  retrain:
    uses: npu/train
    needs: [integrate]
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      model: cnn
      mode: data_parallel
      init: "${{ stages.integrate.outputs.checkpoint }}"
      epochs: 1
      batch_size: 8
      log_steps: 1
`

// tinyRun runs tinySpec with the real mspipe binary (built-in stages are
// that binary re-executed as plugins) and returns the runs directory and
// the run's id.
func tinyRun(t *testing.T) (dir, runsDir, id string) {
	t.Helper()
	dir = t.TempDir()
	bin := filepath.Join(dir, "mspipe")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../../cmd/mspipe").CombinedOutput(); err != nil {
		t.Fatalf("build mspipe: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "tiny.yaml"), []byte(tinySpec), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, "runs"), rerun(t, dir)
}

// rerun runs tiny.yaml again in dir with the binary tinyRun built and
// returns the new run's id.
func rerun(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "mspipe")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, bin, "run", "tiny.yaml")
	run.Dir = dir
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("mspipe run: %v\n%s", err, stderr.String())
	}
	id := strings.TrimSpace(stdout.String())
	if id == "" {
		t.Fatalf("mspipe run printed no run id\n%s", stderr.String())
	}
	return id
}

// stepLosses reads, per stage and rank, the losses of the step events in
// the run's events.jsonl, as the report should draw them.
func stepLosses(t *testing.T, runDir string) map[string]map[int][]float64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[int][]float64{}
	for line := range strings.Lines(string(data)) {
		var ev struct {
			Stage, Event string
			Rank         int
			Loss         float64
			AfterStep    int64 `json:"after_step_device_memory"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events.jsonl: %v", err)
		}
		if ev.Event != "step" {
			continue
		}
		if ev.AfterStep <= 0 {
			t.Fatalf("events.jsonl: a step event without after_step_device_memory: %s", line)
		}
		if out[ev.Stage] == nil {
			out[ev.Stage] = map[int][]float64{}
		}
		out[ev.Stage][ev.Rank] = append(out[ev.Stage][ev.Rank], ev.Loss)
	}
	return out
}

var (
	lossChartRE = regexp.MustCompile(`(?s)<svg class="chart loss-chart".*?</svg>`)
	polylineRE  = regexp.MustCompile(`<polyline class="curve loss" data-stage="([^"]+)" data-run="([^"]*)" data-ranks="([^"]*)" data-points="\d+"[^>]*points="([^"]*)"`)
)

// lossCurve is one loss polyline of a report: a stage's curve for a set of
// ranks, in one run.
type lossCurve struct {
	stage, run string
	ranks      []int
	points     []string
}

// lossCurves returns the loss polylines of an HTML document.
func lossCurves(t *testing.T, html string) []lossCurve {
	t.Helper()
	var out []lossCurve
	for _, chart := range lossChartRE.FindAllString(html, -1) {
		for _, pl := range polylineRE.FindAllStringSubmatch(chart, -1) {
			out = append(out, lossCurve{stage: pl[1], run: pl[2], ranks: parseRankSet(t, pl[3]), points: strings.Fields(pl[4])})
		}
	}
	return out
}

// parseRankSet reads the report's short form of a set of ranks: "0-7, 9".
func parseRankSet(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for part := range strings.SplitSeq(s, ", ") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			t.Fatalf("rank set %q: %v", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				t.Fatalf("rank set %q: %v", s, err)
			}
		}
		for r := a; r <= b; r++ {
			out = append(out, r)
		}
	}
	return out
}

// vertexX is the x coordinate of a polyline vertex "x,y".
func vertexX(t *testing.T, v string) float64 {
	t.Helper()
	x, err := strconv.ParseFloat(strings.SplitN(v, ",", 2)[0], 64)
	if err != nil {
		t.Fatalf("vertex %q: %v", v, err)
	}
	return x
}

func TestReportOfARealRun(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two small models (-short)")
	}
	dir, runsDir, id := tinyRun(t)
	runDir := filepath.Join(runsDir, id)

	code, out, errOut := runCLI(t, "report", "--runs-dir", runsDir)
	want := filepath.Join(runDir, "report.html")
	if code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("report: exit %d, stdout %q (want %s), stderr %q", code, out, want, errOut)
	}
	data, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	html := string(data)

	// Self-contained: nothing to fetch, nothing to run.
	for _, bad := range []string{"<script", "http://", "https://", "src=", "<link", "@import"} {
		if strings.Contains(strings.ReplaceAll(html, `xmlns="http://www.w3.org/2000/svg"`, ""), bad) {
			t.Errorf("report contains %q: not self-contained", bad)
		}
	}
	for _, want := range []string{
		"Run <span class=\"mono\">" + id + "</span>", "tiny-report",
		`data-stage="prepare" data-status="succeeded"`, `data-stage="integrate" data-status="succeeded"`,
		`data-from="prepare" data-to="dp"`, `data-from="prepare" data-to="semi"`, `data-from="semi" data-to="integrate"`,
		`<rect class="bar st-succeeded" data-stage="semi"`,
		// the configuration first, naming mode and strategy
		`<h2>Configuration</h2>`,
		`<tr data-stage="semi"><td class="mono">semi</td><td class="mono">cnn</td><td class="mono">semi_auto_parallel</td><td class="mono">{end_point.matmul: [[1, 1], [2, 1]]}</td><td class="num">2</td>`,
		`<td class="mono">stages.integrate.outputs.checkpoint</td>`,
		// one lineage semi → retrain, one of dp
		`<h3 class="lineage" data-lineage="semi">semi → retrain</h3>`, `<h3 class="lineage" data-lineage="dp">dp</h3>`,
		`<line class="boundary" data-stage="retrain"`,
		// the strategy output of the semi-auto stage and its split tensor
		`<td class="mono">end_point.matmul</td><td class="mono">[[1, 1], [2, 1]]</td>`,
		`<tr class="split"><td class="mono">end_point.weight</td>`,
		// the integrate manifest with its hashes
		`<h2>Checkpoint manifests</h2>`, `<td class="mono">conv1.weight</td>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Every tensor of the manifest is listed with its SHA-256.
	var manifest struct {
		Tensors []struct {
			Name, SHA256 string
		}
	}
	mdata, err := os.ReadFile(filepath.Join(runDir, "stages", "integrate", "checkpoint", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mdata, &manifest); err != nil || len(manifest.Tensors) == 0 {
		t.Fatalf("integrate manifest: %v (%d tensors)", err, len(manifest.Tensors))
	}
	for _, tn := range manifest.Tensors {
		if !strings.Contains(html, fmt.Sprintf(`<td class="mono">%s</td>`, tn.SHA256)) {
			t.Errorf("report lacks the SHA-256 of %s", tn.Name)
		}
	}

	// Every rank's losses are drawn, each set of equal curves once, a
	// vertex per step event.
	losses := stepLosses(t, runDir)
	for _, stage := range []string{"dp", "semi", "retrain"} {
		if len(losses[stage]) != 2 {
			t.Fatalf("stage %s: step events of %d ranks, want 2", stage, len(losses[stage]))
		}
	}
	checkCurves(t, "report.html", lossCurves(t, html), losses)

	// A rerun takes every stage from the cache: its report still draws the
	// curves, from the run that trained them, and links that run.
	id2 := rerun(t, dir)
	code, out, errOut = runCLI(t, "report", "--runs-dir", runsDir, id2)
	if code != 0 {
		t.Fatalf("report of the rerun: exit %d, %s", code, errOut)
	}
	cached, err := os.ReadFile(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	checkCurves(t, "the cached rerun's report", lossCurves(t, string(cached)), losses)
	if link := `<a href="../` + id + `/report.html"`; !strings.Contains(string(cached), link) {
		t.Errorf("the cached rerun's report lacks the link %s to the run that trained it", link)
	}

	// Two runs side by side: both runs' curves on the shared axes.
	code, out, errOut = runCLI(t, "report", "--runs-dir", runsDir, id, id2)
	if code != 0 {
		t.Fatalf("report of two runs: exit %d, %s", code, errOut)
	}
	compared, err := os.ReadFile(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	byRun := map[string]int{}
	for _, c := range lossCurves(t, string(compared)) {
		byRun[c.run]++
	}
	if byRun[id] < 3 || byRun[id2] < 3 {
		t.Errorf("the comparison draws %v loss curves per run, want the 3 stages' curves of both %s and %s", byRun, id, id2)
	}

	evals := evalEvents(t, runDir)
	// dp and semi evaluate after epoch 1 and after their last step, the
	// retrain (one epoch) after its last step.
	if n := [3]int{len(evals["dp"]), len(evals["semi"]), len(evals["retrain"])}; n != [3]int{2, 2, 1} {
		t.Fatalf("evaluations of dp, semi and retrain in events.jsonl: %v, want [2 2 1]", n)
	}
	checkAccuracyAxis(t, "report.html", html, evals)

	chromium := browser.Find()
	if chromium == "" {
		t.Log("SKIP of the browser check: no chromium found (install Debian's chromium package, or set MSPIPE_CHROMIUM)")
		return
	}
	// The browser's DOM has the same curves: the inline SVG parsed as SVG,
	// and the retrain continues the semi stage on its axis: its first
	// vertex is right of the semi stage's last.
	dom := browser.Run(t, chromium, "--dump-dom", "file://"+want)
	domCurves := lossCurves(t, dom)
	checkCurves(t, "chromium's DOM", domCurves, losses)
	semiLast, retrainFirst := math.Inf(-1), math.Inf(1)
	for _, c := range domCurves {
		switch c.stage {
		case "semi":
			semiLast = max(semiLast, vertexX(t, c.points[len(c.points)-1]))
		case "retrain":
			retrainFirst = min(retrainFirst, vertexX(t, c.points[0]))
		}
	}
	if !(retrainFirst > semiLast) {
		t.Errorf("chromium's DOM: the retrain's first vertex (x %.1f) is not right of the semi stage's last (x %.1f)", retrainFirst, semiLast)
	}
	checkAccuracyAxis(t, "chromium's DOM", dom, evals)
	domCompared := browser.Run(t, chromium, "--dump-dom", "file://"+strings.TrimSpace(out))
	byRun = map[string]int{}
	for _, c := range lossCurves(t, domCompared) {
		byRun[c.run]++
	}
	if byRun[id] < 3 || byRun[id2] < 3 {
		t.Errorf("chromium's DOM of the comparison: %v loss curves per run, want 3 of each", byRun)
	}

	// And it paints them: the semi stage's chart alone on a page, with the
	// report's CSS, has curve-coloured pixels inside its plot area.
	style := regexp.MustCompile(`(?s)<style>.*?</style>`).FindString(html)
	var chart string
	for _, m := range lossChartRE.FindAllString(html, -1) {
		if strings.Contains(m, `data-stage="semi"`) {
			chart = m
		}
	}
	pageFile := filepath.Join(t.TempDir(), "chart.html")
	page := "<!DOCTYPE html><html><head><meta charset=\"utf-8\">" + style +
		"<style>body{margin:0;padding:0;max-width:none}</style></head><body>" + chart + "</body></html>"
	if err := os.WriteFile(pageFile, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "chart.png")
	browser.Run(t, chromium, "--window-size=760,280", "--hide-scrollbars", "--screenshot="+shot, "file://"+pageFile)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	// The plot area is x 60..560, y 22..236 (report/charts.go; the legend
	// is right of it). Grid, axes, the stage boundary and text are grey:
	// the curves are the only saturated colour there.
	plot := image.Rect(61, 23, 560, 236)
	curve := 0
	for y := plot.Min.Y; y < plot.Max.Y; y++ {
		for x := plot.Min.X; x < plot.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if max(r, g, b)-min(r, g, b) > 0x5000 {
				curve++
			}
		}
	}
	t.Logf("%d curve-coloured pixels in the semi → retrain plot area", curve)
	// Sixteen steps across 500 pixels make a line some 500 pixels long.
	if curve < 300 {
		t.Errorf("the semi → retrain loss chart has %d curve-coloured pixels in its plot area, want at least 300", curve)
	}
}

// checkCurves compares the loss polylines found in a document with the
// step events: each stage's every rank is in exactly one polyline of that
// stage, a vertex per step; ranks with equal losses share one.
func checkCurves(t *testing.T, what string, curves []lossCurve, losses map[string]map[int][]float64) {
	t.Helper()
	for stage, ranks := range losses {
		drawn := 0
		for rank, l := range ranks {
			var in []lossCurve
			for _, c := range curves {
				if c.stage == stage && slices.Contains(c.ranks, rank) {
					in = append(in, c)
				}
			}
			if len(in) != 1 || len(in[0].points) != len(l) || len(l) < 5 {
				t.Errorf("%s: stage %s rank %d: in %d curves (want 1) with %v points, want %d (≥ 5)", what, stage, rank, len(in), in, len(l))
			}
		}
		for _, c := range curves {
			if c.stage == stage {
				drawn++
			}
		}
		if equal := slices.Equal(ranks[0], ranks[1]); equal && drawn != 1 || !equal && drawn != 2 {
			t.Errorf("%s: stage %s: %d curves for 2 ranks whose losses are equal: %v", what, stage, drawn, equal)
		}
	}
}

// No run to report on, or an output path that cannot be written, is a
// usage or I/O error (exit 2) with one clear line.
func TestReportErrors(t *testing.T) {
	code, _, errOut := runCLI(t, "report", "--runs-dir", t.TempDir())
	if code != ExitUsage || !strings.Contains(errOut, "run not found") {
		t.Errorf("no runs: exit %d, stderr %q", code, errOut)
	}
	runs := writeRun(t, "stages/s/stage.log")
	out := filepath.Join(t.TempDir(), "missing", "report.html")
	code, _, errOut = runCLI(t, "report", "--runs-dir", runs, "-o", out)
	if code != ExitUsage || !strings.Contains(errOut, "write report") {
		t.Errorf("unwritable output: exit %d, stderr %q", code, errOut)
	}
	// The hand-made run has no events and no spec copy: the report still
	// renders and says what it could not show.
	code, stdout, errOut := runCLI(t, "report", "--runs-dir", runs)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	data, err := os.ReadFile(strings.TrimSpace(stdout))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h2>Not shown</h2>", "no events log", "No stage of this run reported training steps", `data-stage="s" data-status="failed"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// evalPoint is one eval_accuracy metric of events.jsonl.
type evalPoint struct {
	step     int64
	accuracy float64
}

// evalEvents reads each stage's eval_accuracy metrics from the run's
// events.jsonl, in the order written.
func evalEvents(t *testing.T, runDir string) map[string][]evalPoint {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]evalPoint{}
	for line := range strings.Lines(string(data)) {
		var ev struct {
			Stage, Event, Name string
			Value              float64
			Step               int64
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events.jsonl: %v", err)
		}
		if ev.Event == "metric" && ev.Name == "eval_accuracy" {
			out[ev.Stage] = append(out[ev.Stage], evalPoint{ev.Step, ev.Value})
		}
	}
	return out
}

var (
	accuracyChartRE = regexp.MustCompile(`(?s)<svg class="chart accuracy-chart".*?</svg>`)
	accuracyLineRE  = regexp.MustCompile(`<polyline class="curve accuracy" data-stage="[^"]*" data-run="[^"]*" data-ranks="[^"]*" data-points="\d+"[^>]*points="([^"]*)"`)
	plotAxisRE      = regexp.MustCompile(`<line class="axis" x1="([0-9.]+)" x2="([0-9.]+)"`)
	dotLabelRE      = regexp.MustCompile(`<circle class="dot"[^>]*(?:/>|></circle>)\s*<text[^>]*>([0-9.]+)</text>`)
)

// checkAccuracyAxis checks the accuracy chart of the semi → retrain
// lineage in html: a vertex and a labelled dot per evaluation of semi and
// the retrain, each at the place of its global step on the loss chart's
// axis (the two charts differ in size, so in the same fraction of the
// plot's width as the loss vertex of that step).
func checkAccuracyAxis(t *testing.T, what, html string, evals map[string][]evalPoint) {
	t.Helper()
	start := strings.Index(html, `<h3 class="lineage" data-lineage="semi">`)
	if start < 0 {
		t.Fatalf("%s: no lineage semi", what)
	}
	section := html[start:]
	if end := strings.Index(section[1:], "<h3"); end >= 0 {
		section = section[:end+1]
	}
	lossChart := lossChartRE.FindString(section)
	accChart := accuracyChartRE.FindString(section)
	if lossChart == "" || accChart == "" {
		t.Fatalf("%s: the semi lineage lacks its loss or accuracy chart", what)
	}
	fraction := func(chart string) func(x float64) float64 {
		m := plotAxisRE.FindStringSubmatch(chart)
		if m == nil {
			t.Fatalf("%s: a chart without its x axis", what)
		}
		l, _ := strconv.ParseFloat(m[1], 64)
		r, _ := strconv.ParseFloat(m[2], 64)
		return func(x float64) float64 { return (x - l) / (r - l) }
	}
	lossAt, accAt := fraction(lossChart), fraction(accChart)
	// The loss vertex of each global step of the lineage (a vertex per
	// step: the stages are short).
	// The retrain continues semi's count, which ends at semi's final
	// evaluation.
	lossX := map[int64]float64{}
	for _, pl := range polylineRE.FindAllStringSubmatch(lossChart, -1) {
		stage, points := pl[1], strings.Fields(pl[4])
		for i, p := range points {
			step := int64(i + 1)
			if stage == "retrain" {
				step += evals["semi"][len(evals["semi"])-1].step
			}
			lossX[step] = vertexX(t, p)
		}
	}
	want := append(append([]evalPoint(nil), evals["semi"]...), evals["retrain"]...)
	lines := accuracyLineRE.FindAllStringSubmatch(accChart, -1)
	if len(lines) != 1 {
		t.Fatalf("%s: %d accuracy curves in the semi lineage, want 1", what, len(lines))
	}
	points := strings.Fields(lines[0][1])
	labels := dotLabelRE.FindAllStringSubmatch(accChart, -1)
	if len(points) != len(want) || len(labels) != len(want) {
		t.Fatalf("%s: accuracy curve of %d vertices and %d labelled dots, want one per evaluation: %v", what, len(points), len(labels), want)
	}
	for i, e := range want {
		lx, ok := lossX[e.step]
		if !ok {
			t.Fatalf("%s: no loss vertex at global step %d", what, e.step)
		}
		if got, wantF := accAt(vertexX(t, points[i])), lossAt(lx); math.Abs(got-wantF) > 0.005 {
			t.Errorf("%s: the evaluation at global step %d sits at %.3f of the accuracy axis, the step's loss at %.3f", what, e.step, got, wantF)
		}
		if l := strconv.FormatFloat(e.accuracy, 'f', 3, 64); labels[i][1] != l {
			t.Errorf("%s: dot %d says %s, the event %s", what, i, labels[i][1], l)
		}
	}
}
