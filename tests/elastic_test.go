package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestElasticShrinkInEventsAndReport runs a pipeline whose data_parallel
// training loses rank 2 of 4 at step 6 with on_failure: shrink: the run
// succeeds, its events log holds the shrink record (through the plugin
// protocol and the engine), and mspipe report marks the shrink on the
// loss chart and lists it in the stage's section.
func TestElasticShrinkInEventsAndReport(t *testing.T) {
	w := newWorkspace(t)
	w.write("elastic.yaml", `version: 1
name: elastic
cluster: {devices: 4}
stages:
  prepare: {uses: cifar/prepare, with: {train_images: 80, test_images: 20, shards: 4}}
  train:
    uses: npu/train
    needs: prepare
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      model: cnn
      mode: data_parallel
      epochs: 2
      batch_size: 2
      save_checkpoint_steps: 2
      shuffle_buffer: -1
      eval: false
      threads: 1
      collective_timeout: 20s
      on_failure: shrink
      fault: {rank: 2, step: 6}
`)
	res := w.run("run", "elastic.yaml")
	if res.code != 0 {
		t.Fatalf("run: exit %d\n%s", res.code, res.stderr)
	}
	runs, _ := filepath.Glob(filepath.Join(w.dir, "runs", "*", "run.json"))
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	runDir := filepath.Dir(runs[0])
	st := w.state(filepath.Base(runDir))
	if got := st.Stages["train"].Outputs["checkpoints"]; got != filepath.Join(runDir, "stages", "train", "shrink1") {
		t.Errorf("checkpoints output %v, want the shrunk job's", got)
	}
	events, err := os.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var record string
	for _, line := range strings.Split(string(events), "\n") {
		if strings.Contains(line, `"record":"shrink"`) {
			record = line
		}
	}
	for _, want := range []string{`"stage":"train"`, `"lost_rank":2`, `"resumed_step":4`, `"from_devices":4`, `"to_devices":2`} {
		if !strings.Contains(record, want) {
			t.Errorf("the events log's shrink record %q lacks %s", record, want)
		}
	}
	rep := w.run("report", filepath.Base(runDir))
	if rep.code != 0 {
		t.Fatalf("report: exit %d\n%s", rep.code, rep.stderr)
	}
	html, err := os.ReadFile(filepath.Join(runDir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<line class="shrink"`, `shrink: 4 → 2 devices</text>`, `<table class="shrinks">`, `<td>data_parallel on 2 devices, batch 4 per device</td>`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
}

// TestElasticExampleShrinksAndFinishes runs examples/elastic.yaml as a
// user would: rank 5 of 8 dies at step 25, the stage goes on from the
// checkpoint of step 20 on 4 devices and finishes every step of its two
// epochs (40 a epoch), its outputs from the shrunk job.
func TestElasticExampleShrinksAndFinishes(t *testing.T) {
	spec, err := os.ReadFile("../examples/elastic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t)
	w.write("elastic.yaml", string(spec))
	res := w.run("run", "elastic.yaml")
	if res.code != 0 {
		t.Fatalf("run: exit %d\n%s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "rank 5 lost") || !strings.Contains(res.stderr, "from 8 to 4 devices") {
		t.Errorf("the console does not tell of the shrink:\n%s", res.stderr)
	}
	// The shrink record's sentence says it all; its fields are for
	// events.jsonl, not repeated on the console as key=value.
	for _, line := range strings.Split(res.stderr, "\n") {
		if strings.Contains(line, "shrink 1:") && strings.Contains(line, "lost_rank=") {
			t.Errorf("the console repeats the shrink record's fields: %s", line)
		}
	}
	runs, _ := filepath.Glob(filepath.Join(w.dir, "runs", "*", "run.json"))
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
	runDir := filepath.Dir(runs[0])
	out := w.state(filepath.Base(runDir)).Stages["train"].Outputs
	if got := out["checkpoints"]; got != filepath.Join(runDir, "stages", "train", "shrink1") {
		t.Errorf("checkpoints output %v, want the shrunk job's", got)
	}
	if got, ok := out["global_step"].(float64); !ok || got != 80 {
		t.Errorf("global_step output %v, want 80 (2 epochs of 40 steps)", out["global_step"])
	}
}
