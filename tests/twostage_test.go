package tests

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/browser"

	"gopkg.in/yaml.v3"

	"github.com/mspipe/mspipe/npu/ckpt"
)

// The shortened two-stage pipeline: 2,560 synthetic images, so 20 steps per
// epoch on both clusters (8 ranks of 16 images, then 4 ranks of 32: the
// same global batch of 128), and a small CNN instead of ResNet-20 so that
// five epochs learn enough for a reset to show.
const (
	shortTrainImages   = 2560
	shortTestImages    = 500
	shortEpochs        = 5
	shortRetrainEpochs = 1
	shortStepsPerEpoch = 20
)

// shortenedTwoStage returns examples/two-stage-training.yaml with the
// overrides above, and three stages added to check it: npu/eval on the
// integrated checkpoint and on the resharded one (the evaluation at the
// start of the new cluster, which npu/train only does at its end), and
// retrain_scratch, the retrain without init: the untrained loss on the very
// batches the retrain sees first.
func shortenedTwoStage(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../examples/two-stage-training.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatalf("examples/two-stage-training.yaml: %v", err)
	}
	root := doc.Content[0]
	stages := yamlChild(t, root, "stages")
	with := func(stage string) *yaml.Node { return yamlChild(t, yamlChild(t, stages, stage), "with") }

	yamlSet(t, with("prepare"), "train_images", shortTrainImages)
	yamlSet(t, with("prepare"), "test_images", shortTestImages)
	for stage, batch := range map[string]int{"train": 16, "retrain": 32} {
		yamlSet(t, with(stage), "model", "cnn")
		yamlSet(t, with(stage), "batch_size", batch)
		yamlSet(t, with(stage), "learning_rate", 0.05)
	}
	// The reshard targets the retrain's layout: the same model and batch.
	yamlSet(t, with("reshard"), "model", "cnn")
	yamlSet(t, with("reshard"), "batch_size", 32)

	var scratch yaml.Node
	if err := scratch.Encode(yamlCopy(t, yamlChild(t, stages, "retrain"))); err != nil {
		t.Fatal(err)
	}
	yamlDelete(t, yamlChild(t, &scratch, "with"), "init")
	yamlDelete(t, &scratch, "if")
	yamlSet(t, &scratch, "needs", []string{"prepare"})
	yamlAppend(t, stages, "retrain_scratch", &scratch)

	for id, spec := range map[string]map[string]any{
		"eval_integrated": {"uses": "npu/eval", "needs": []string{"integrate"}, "with": map[string]any{
			"checkpoint": "${{ stages.integrate.outputs.checkpoint }}", "data": "${{ stages.prepare.outputs.dir }}", "model": "cnn"}},
		"eval_resharded": {"uses": "npu/eval", "needs": []string{"reshard"}, "with": map[string]any{
			"checkpoint": "${{ stages.reshard.outputs.checkpoints }}", "data": "${{ stages.prepare.outputs.dir }}", "model": "cnn"}},
	} {
		var n yaml.Node
		if err := n.Encode(spec); err != nil {
			t.Fatal(err)
		}
		yamlAppend(t, stages, id, &n)
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// yamlChild returns the value of key in the mapping m.
func yamlChild(t *testing.T, m *yaml.Node, key string) *yaml.Node {
	t.Helper()
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	t.Fatalf("line %d: no key %q", m.Line, key)
	return nil
}

// yamlSet sets key of the mapping m to v, replacing its value or adding it.
func yamlSet(t *testing.T, m *yaml.Node, key string, v any) {
	t.Helper()
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = &n
			return
		}
	}
	yamlAppend(t, m, key, &n)
}

func yamlAppend(t *testing.T, m *yaml.Node, key string, v *yaml.Node) {
	t.Helper()
	if m.Kind != yaml.MappingNode {
		t.Fatalf("line %d: not a mapping", m.Line)
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

func yamlDelete(t *testing.T, m *yaml.Node, key string) {
	t.Helper()
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
	t.Fatalf("line %d: no key %q to delete", m.Line, key)
}

// yamlCopy decodes a node into plain values, so that it can be encoded
// into a new node that shares nothing with it.
func yamlCopy(t *testing.T, n *yaml.Node) any {
	t.Helper()
	var v any
	if err := n.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// stepEvent is the part of an npu/train step event in events.jsonl the
// tests read.
type stepEvent struct {
	Stage      string  `json:"stage"`
	Event      string  `json:"event"`
	Rank       int     `json:"rank"`
	Epoch      int     `json:"epoch"`
	Step       int     `json:"step"`
	GlobalStep int     `json:"global_step"`
	Loss       float64 `json:"loss"`
}

// rank0Steps returns rank 0's step events of each stage, in global step
// order, from a run's events.jsonl.
func rank0Steps(t *testing.T, runDir string) map[string][]stepEvent {
	t.Helper()
	f, err := os.Open(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]stepEvent{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev stepEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("events.jsonl: %v: %s", err, sc.Bytes())
		}
		if ev.Event != "step" || ev.Rank != 0 {
			continue
		}
		if prev := out[ev.Stage]; len(prev) > 0 && prev[len(prev)-1].GlobalStep >= ev.GlobalStep {
			t.Fatalf("stage %s: rank 0's global step %d after %d", ev.Stage, ev.GlobalStep, prev[len(prev)-1].GlobalStep)
		}
		out[ev.Stage] = append(out[ev.Stage], ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// manifestHashes reads a ckpt/integrate or ckpt/reshard manifest.json:
// every tensor's dtype, shape and content hash, by name.
func manifestHashes(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Tensors []struct {
			Name   string  `json:"name"`
			DType  string  `json:"dtype"`
			Shape  []int64 `json:"shape"`
			SHA256 string  `json:"sha256"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, tn := range m.Tensors {
		if tn.SHA256 == "" {
			t.Fatalf("%s: tensor %s has no sha256", path, tn.Name)
		}
		out[tn.Name] = fmt.Sprintf("%s %v %s", tn.DType, tn.Shape, tn.SHA256)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no tensors", path)
	}
	return out
}

// savedGlobalSteps returns the optimizer's global_step in the newest
// checkpoint of ranks 0..ranks-1 under a training stage's directory
// (device{i}/ckpt_{i}/).
func savedGlobalSteps(t *testing.T, stageDir string, ranks int) []int {
	t.Helper()
	var out []int
	for r := range ranks {
		file, err := ckpt.Latest(filepath.Join(stageDir, fmt.Sprintf("device%d", r), fmt.Sprintf("ckpt_%d", r)), "CKP")
		if err != nil {
			t.Fatal(err)
		}
		tensors, err := ckpt.Read(file)
		if err != nil {
			t.Fatal(err)
		}
		step := -1
		for _, tn := range tensors {
			if tn.Name == "global_step" {
				if tn.DType != ckpt.DTypeInt32 || len(tn.Data) != 4 {
					t.Fatalf("%s: global_step is %s of %d bytes, want one Int32", file, tn.DType, len(tn.Data))
				}
				step = int(int32(binary.LittleEndian.Uint32(tn.Data)))
			}
		}
		if step < 0 {
			t.Fatalf("%s: no global_step (the optimizer state was not saved)", file)
		}
		out = append(out, step)
	}
	return out
}

func mean(losses []stepEvent) float64 {
	s := 0.0
	for _, e := range losses {
		s += e.Loss
	}
	return s / float64(len(losses))
}

// TestTwoStageContinuesAcrossTheReshard runs a shortened copy of
// examples/two-stage-training.yaml (train on 8, integrate, reshard to 4,
// retrain on 4) and checks that the retrain continues the training instead
// of starting over: the weights and the optimizer state cross the reshard
// unchanged, the model evaluates the same before and after, the first
// retrain loss is that of the trained model, not of an untrained one, and
// the retrain ends at least as accurate as the training did; and the run's
// report renders in headless Chromium with both trainings' loss curves.
func TestTwoStageContinuesAcrossTheReshard(t *testing.T) {
	w := newWorkspace(t)
	w.write("two-stage.yaml", shortenedTwoStage(t))
	r := w.runFor(300, "run", "two-stage.yaml",
		"-p", fmt.Sprintf("epochs=%d", shortEpochs), "-p", fmt.Sprintf("retrain_epochs=%d", shortRetrainEpochs))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	st := w.state(id)
	if st.Status != "succeeded" {
		t.Fatalf("run %s", st.Status)
	}
	stageIDs := []string{"prepare", "train", "integrate", "reshard", "retrain", "retrain_scratch", "eval_integrated", "eval_resharded"}
	if len(st.Stages) != len(stageIDs) {
		t.Errorf("%d stages in run.json, want %d", len(st.Stages), len(stageIDs))
	}
	for _, s := range stageIDs {
		if got := st.Stages[s].Status; got != "succeeded" {
			t.Fatalf("stage %s: %q, want succeeded (reason %q)", s, got, st.Stages[s].Reason)
		}
	}
	out := func(stage, name string) float64 {
		t.Helper()
		v, ok := st.Stages[stage].Outputs[name].(float64)
		if !ok {
			t.Fatalf("stage %s: output %s is %v", stage, name, st.Stages[stage].Outputs[name])
		}
		return v
	}
	runDir := filepath.Join(w.dir, "runs", id)

	// The checkpoint crosses the reshard unchanged: every tensor, the
	// optimizer's moments and global_step included, has the content hash
	// the integrated checkpoint has.
	integrated := manifestHashes(t, filepath.Join(runDir, "stages", "integrate", "checkpoint", "manifest.json"))
	resharded := manifestHashes(t, filepath.Join(runDir, "stages", "reshard", "checkpoints", "manifest.json"))
	for name, h := range integrated {
		if resharded[name] != h {
			t.Errorf("tensor %s: reshard manifest %q, integrate manifest %q", name, resharded[name], h)
		}
	}
	for name := range resharded {
		if _, ok := integrated[name]; !ok {
			t.Errorf("tensor %s: in the reshard manifest only", name)
		}
	}
	for _, name := range []string{"global_step", "learning_rate", "momentum", "moments.end_point.weight", "moments.conv1.weight"} {
		if _, ok := integrated[name]; !ok {
			t.Errorf("integrated checkpoint has no %s: the optimizer state is not carried", name)
		}
	}

	// The reshard wrote the retrain's own layout: no rank of the retrain
	// re-cuts a whole tensor at init (each says so in its log).
	for r := range 4 {
		log, err := os.ReadFile(filepath.Join(runDir, "stages", "retrain", fmt.Sprintf("device%d", r), fmt.Sprintf("train.log%d", r)))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "is in this rank's layout: no tensor re-cut") {
			t.Errorf("retrain rank %d re-cut tensors of the resharded checkpoint, or did not say:\n%s", r, log)
		}
	}

	// The first evaluation on the new cluster equals the last on the old:
	// rank 0's resharded checkpoint scores what the integrated one scores,
	// and that is the accuracy the training reported from its own ranks
	// (within one test image: the split model rounds its sums differently).
	accInt, lossInt := out("eval_integrated", "accuracy"), out("eval_integrated", "loss")
	accRes, lossRes := out("eval_resharded", "accuracy"), out("eval_resharded", "loss")
	if accRes != accInt || lossRes != lossInt {
		t.Errorf("resharded checkpoint: accuracy %v loss %v; integrated: accuracy %v loss %v", accRes, lossRes, accInt, lossInt)
	}
	accTrain := out("train", "accuracy")
	if math.Abs(accTrain-accInt) > 1.0/shortTestImages+1e-9 {
		t.Errorf("integrated checkpoint's accuracy %v, the training reported %v", accInt, accTrain)
	}

	// The loss curve continues. The retrain's first step runs on the same
	// batch as retrain_scratch's, whose model is untrained.
	steps := rank0Steps(t, runDir)
	train, retrain, scratch := steps["train"], steps["retrain"], steps["retrain_scratch"]
	if len(train) != shortEpochs*shortStepsPerEpoch || len(retrain) != shortRetrainEpochs*shortStepsPerEpoch || len(scratch) != len(retrain) {
		t.Fatalf("rank 0 step events: train %d, retrain %d, retrain_scratch %d; want %d, %d, %d",
			len(train), len(retrain), len(scratch), shortEpochs*shortStepsPerEpoch, shortRetrainEpochs*shortStepsPerEpoch, shortRetrainEpochs*shortStepsPerEpoch)
	}
	lastEpoch := train[len(train)-shortStepsPerEpoch:]
	first, untrained, trained := retrain[0].Loss, scratch[0].Loss, mean(lastEpoch)
	t.Logf("loss: train's last epoch mean %.4f (last step %.4f), retrain's first step %.4f, untrained on that batch %.4f (ln 10 = %.4f)",
		trained, train[len(train)-1].Loss, first, untrained, math.Log(10))
	t.Logf("accuracy: train %.4f, integrated %.4f, resharded %.4f, retrain %.4f, retrain from scratch %.4f",
		accTrain, accInt, accRes, out("retrain", "accuracy"), out("retrain_scratch", "accuracy"))
	if math.Abs(untrained-math.Log(10)) > 0.1 {
		t.Errorf("untrained first loss %.4f, want about ln 10 = %.4f", untrained, math.Log(10))
	}
	if first > trained+0.1 {
		t.Errorf("retrain's first loss %.4f, more than 0.1 above the train's last epoch (%.4f)", first, trained)
	}
	if first > untrained-0.1 {
		t.Errorf("retrain's first loss %.4f is not clearly below the untrained %.4f: the training was lost", first, untrained)
	}
	if acc := out("retrain", "accuracy"); acc < accTrain {
		t.Errorf("retrain's accuracy %.4f, below the train's %.4f", acc, accTrain)
	}

	// The optimizer state carried over. As in MindSpore, the optimizer's
	// global_step parameter is loaded with the weights and keeps counting,
	// while the epoch and step numbers of the log and the checkpoint file
	// names start again at epoch 1 step 1 (a new Model.train);
	// retrain_scratch counts from 0. The retrains save integrated checkpoints (MindSpore's default,
	// integrated_save: true): rank 0 holds the whole state.
	trainSteps := int(out("train", "global_step"))
	if trainSteps != shortEpochs*shortStepsPerEpoch {
		t.Errorf("train: global_step %d, want %d", trainSteps, shortEpochs*shortStepsPerEpoch)
	}
	// The step events and the stage's global_step carry the optimizer's
	// count, so one loss curve runs through both stages.
	want := trainSteps + shortRetrainEpochs*shortStepsPerEpoch
	if retrain[0].Epoch != 1 || retrain[0].Step != 1 || retrain[0].GlobalStep != trainSteps+1 || retrain[len(retrain)-1].GlobalStep != want {
		t.Errorf("retrain's step events: first epoch %d step %d global step %d, last global step %d; want 1 1 %d, %d",
			retrain[0].Epoch, retrain[0].Step, retrain[0].GlobalStep, retrain[len(retrain)-1].GlobalStep, trainSteps+1, want)
	}
	if g := int(out("retrain", "global_step")); g != want {
		t.Errorf("retrain: global_step output %d, want %d", g, want)
	}
	for rank, g := range savedGlobalSteps(t, filepath.Join(runDir, "stages", "retrain"), 1) {
		if g != want {
			t.Errorf("retrain rank %d: saved global_step %d, want %d (the train's %d + %d)", rank, g, want, trainSteps, want-trainSteps)
		}
	}
	for rank, g := range savedGlobalSteps(t, filepath.Join(runDir, "stages", "retrain_scratch"), 1) {
		if g != shortRetrainEpochs*shortStepsPerEpoch {
			t.Errorf("retrain_scratch rank %d: saved global_step %d, want %d", rank, g, shortRetrainEpochs*shortStepsPerEpoch)
		}
	}

	// The run's report renders in a browser with a loss curve for the
	// training on each cluster: a line per rank, a vertex per step.
	rep := w.run("report", id)
	if rep.code != 0 {
		t.Fatalf("report: exit %d\n%s", rep.code, rep.stderr)
	}
	page := filepath.Join(runDir, "report.html")
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	ranks := map[string]int{"train": 8, "retrain": 4}
	stepCounts := map[string]int{"train": shortEpochs * shortStepsPerEpoch, "retrain": shortRetrainEpochs * shortStepsPerEpoch}
	checkLossCurves(t, "report.html", string(html), ranks, stepCounts)
	chromium := browser.Find()
	if chromium == "" {
		t.Log("SKIP of the browser check: no chromium found (.ci/run installs Debian's chromium; or set MSPIPE_CHROMIUM)")
		return
	}
	checkLossCurves(t, "chromium's DOM", browser.Run(t, chromium, "--dump-dom", "file://"+page), ranks, stepCounts)
}

var (
	lossChartRE = regexp.MustCompile(`(?s)<svg class="loss-chart" data-stage="([^"]+)".*?</svg>`)
	polylineRE  = regexp.MustCompile(`<polyline class="curve loss" data-rank="(\d+)"[^>]*points="([^"]*)"`)
)

// checkLossCurves checks that html has, for each stage of ranks, a loss
// chart with one polyline per rank of steps[stage] vertices.
func checkLossCurves(t *testing.T, what, html string, ranks, steps map[string]int) {
	t.Helper()
	found := map[string]map[int]int{}
	for _, chart := range lossChartRE.FindAllStringSubmatch(html, -1) {
		found[chart[1]] = map[int]int{}
		for _, pl := range polylineRE.FindAllStringSubmatch(chart[0], -1) {
			rank, _ := strconv.Atoi(pl[1])
			found[chart[1]][rank] = len(strings.Fields(pl[2]))
		}
	}
	for stage, n := range ranks {
		if len(found[stage]) != n {
			t.Errorf("%s: %d loss lines for stage %s, want one per rank (%d)", what, len(found[stage]), stage, n)
		}
		for rank, points := range found[stage] {
			if points != steps[stage] {
				t.Errorf("%s: stage %s rank %d's loss line has %d points, want %d (one per step)", what, stage, rank, points, steps[stage])
			}
		}
	}
}
