package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/internal/testutil/browser"
)

// tinySpec trains a CNN on two simulated devices twice, data parallel and
// semi-auto parallel (with a strategy file as output), on a few synthetic
// images, and integrates the semi-auto stage's slices (a reshard manifest).
const tinySpec = `version: 1
name: tiny-report
cluster: {devices: 2}
stages:
  prepare: {uses: cifar/prepare, with: {source: synthetic, train_images: 128, test_images: 32, shards: 2}}
  dp:
    uses: npu/train
    needs: [prepare]
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, epochs: 1, batch_size: 8, log_steps: 1}
  semi:
    uses: npu/train
    needs: [prepare]
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      model: cnn
      mode: semi_auto_parallel
      strategy: {end_point.matmul: [[1, 1], [2, 1]]}
      integrated_save: false
      epochs: 1
      batch_size: 8
      log_steps: 1
  integrate: {uses: ckpt/integrate, needs: [semi], with: {from: "${{ stages.semi.outputs.checkpoints }}"}}
`

// tinyRun runs tinySpec with the real mspipe binary (built-in stages are
// that binary re-executed as plugins) and returns the runs directory and
// the run's id.
func tinyRun(t *testing.T) (runsDir, id string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "mspipe")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../../cmd/mspipe").CombinedOutput(); err != nil {
		t.Fatalf("build mspipe: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "tiny.yaml"), []byte(tinySpec), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, bin, "run", "tiny.yaml")
	run.Dir = dir
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("mspipe run: %v\n%s", err, stderr.String())
	}
	id = strings.TrimSpace(stdout.String())
	if id == "" {
		t.Fatalf("mspipe run printed no run id\n%s", stderr.String())
	}
	return filepath.Join(dir, "runs"), id
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
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events.jsonl: %v", err)
		}
		if ev.Event != "step" {
			continue
		}
		if out[ev.Stage] == nil {
			out[ev.Stage] = map[int][]float64{}
		}
		out[ev.Stage][ev.Rank] = append(out[ev.Stage][ev.Rank], ev.Loss)
	}
	return out
}

var (
	lossChartRE = regexp.MustCompile(`(?s)<svg class="loss-chart" data-stage="([^"]+)".*?</svg>`)
	polylineRE  = regexp.MustCompile(`<polyline class="curve loss" data-rank="(\d+)"[^>]*points="([^"]*)"`)
)

// curvePoints returns, per stage and rank, how many vertices the loss
// polylines of an HTML document have.
func curvePoints(html string) map[string]map[int]int {
	out := map[string]map[int]int{}
	for _, chart := range lossChartRE.FindAllStringSubmatch(html, -1) {
		out[chart[1]] = map[int]int{}
		for _, pl := range polylineRE.FindAllStringSubmatch(chart[0], -1) {
			rank, _ := strconv.Atoi(pl[1])
			out[chart[1]][rank] = len(strings.Fields(pl[2]))
		}
	}
	return out
}

func TestReportOfARealRun(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two small models (-short)")
	}
	runsDir, id := tinyRun(t)
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
		// the strategy output of the semi-auto stage and its layouts
		`<td class="mono">end_point.matmul</td><td class="mono">[[1, 1], [2, 1]]</td>`,
		`<td class="mono">end_point.weight</td>`,
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

	// One loss curve per stage and rank, a vertex per step event.
	losses := stepLosses(t, runDir)
	for _, stage := range []string{"dp", "semi"} {
		if len(losses[stage]) != 2 {
			t.Fatalf("stage %s: step events of %d ranks, want 2", stage, len(losses[stage]))
		}
	}
	checkCurves(t, "report.html", curvePoints(html), losses)

	chromium := browser.Find()
	if chromium == "" {
		t.Log("SKIP of the browser check: no chromium found (install Debian's chromium package, or set MSPIPE_CHROMIUM)")
		return
	}
	// The browser's DOM has the same curves: the inline SVG parsed as SVG.
	dom := browser.Run(t, chromium, "--dump-dom", "file://"+want)
	checkCurves(t, "chromium's DOM", curvePoints(dom), losses)

	// And it paints them: the semi stage's chart alone on a page, with the
	// report's CSS, has curve-coloured pixels inside its plot area.
	style := regexp.MustCompile(`(?s)<style>.*?</style>`).FindString(html)
	var chart string
	for _, m := range lossChartRE.FindAllStringSubmatch(html, -1) {
		if m[1] == "semi" {
			chart = m[0]
		}
	}
	pageFile := filepath.Join(t.TempDir(), "chart.html")
	page := "<!DOCTYPE html><html><head><meta charset=\"utf-8\">" + style +
		"<style>body{margin:0;padding:0;max-width:none}</style></head><body>" + chart + "</body></html>"
	if err := os.WriteFile(pageFile, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "chart.png")
	browser.Run(t, chromium, "--window-size=720,300", "--hide-scrollbars", "--screenshot="+shot, "file://"+pageFile)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	// The plot area is x 60..620, y 16..256 (report/charts.go; the legend
	// is right of it). Grid, axes and text are grey: the curves are the
	// only saturated colour there.
	plot := image.Rect(61, 17, 620, 256)
	curve := 0
	for y := plot.Min.Y; y < plot.Max.Y; y++ {
		for x := plot.Min.X; x < plot.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if max(r, g, b)-min(r, g, b) > 0x5000 {
				curve++
			}
		}
	}
	t.Logf("%d curve-coloured pixels in the semi stage's plot area", curve)
	// Seven steps across 560 pixels make a line some 560 pixels long.
	if curve < 300 {
		t.Errorf("the semi stage's loss chart has %d curve-coloured pixels in its plot area, want at least 300", curve)
	}
}

// checkCurves compares the loss polylines found in a document with the
// step events: one polyline per stage and rank, a vertex per step.
func checkCurves(t *testing.T, what string, got map[string]map[int]int, losses map[string]map[int][]float64) {
	t.Helper()
	for stage, ranks := range losses {
		for rank, l := range ranks {
			if got[stage][rank] != len(l) || len(l) < 5 {
				t.Errorf("%s: stage %s rank %d: %d curve points, want %d (≥ 5)", what, stage, rank, got[stage][rank], len(l))
			}
		}
	}
	if len(got) != len(losses) {
		t.Errorf("%s: loss charts for %d stages, want %d", what, len(got), len(losses))
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
