package job

import (
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

// A pipeline's plan lays one micro-batch out over a stage group, lists
// the stages with their ranks, operators and parameters, and gives the
// bubble (K−1)/(M+K−1).
func TestPlanTextPipeline(t *testing.T) {
	var b strings.Builder
	l := Layout{Model: "cnn", Mode: parallel.SemiAutoParallel, BatchSize: 8, Devices: 8, PipelineStages: 2, MicroSize: 4,
		Strategy: parallel.Strategy{"conv2": {{2, 1, 1, 1}, {2, 1, 1, 1}}}}
	if err := PlanText(&b, l); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"cnn in semi_auto_parallel on 8 devices: 2 pipeline stages of 4 devices, global batch 32 in 4 micro-batches of 8 (1f1b)",
		"cnn on 4 devices:",
		"0      0-3    conv1 … pool1 (3)  448",
		"1      4-7    conv2 … loss (8)   4970",
		"bubble: (K−1)/(M+K−1) = 1/5 = 20.0%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	// A strategy that does not fit a stage group of 4 is refused, naming
	// the key.
	l.Strategy = parallel.Strategy{"conv2": {{8, 1, 1, 1}, {1, 1, 1, 1}}}
	if err := PlanText(&b, l); err == nil || !strings.Contains(err.Error(), "with.strategy") {
		t.Errorf("a strategy over 8 devices in a stage of 4: %v", err)
	}
	l.Strategy, l.PipelineStage = nil, map[string]int{"nothing": 1}
	if err := PlanText(&b, l); err == nil || !strings.Contains(err.Error(), "with.pipeline_stage") {
		t.Errorf("an unknown operator in pipeline_stage: %v", err)
	}
}

// Each rank's ports in a pipeline job come from its own block, so the
// job's communicator, the stage groups and the links never share one.
func TestPortBlocksDoNotCollide(t *testing.T) {
	const base, devices, stages = 20000, 8, 4
	per := devices / stages
	used := map[int]string{}
	take := func(port int, what string) {
		if prev, ok := used[port]; ok {
			t.Fatalf("port %d used by %s and %s", port, prev, what)
		}
		used[port] = what
	}
	for r := range devices {
		s := r / per
		take(base+r, "job")
		take(base+stageBlock*devices+r, "stage")
		if s < stages-1 {
			take(base+linkBlock(s)*devices+r, "next link")
		}
		if s > 0 {
			take(base+linkBlock(s-1)*devices+r, "previous link")
		}
	}
	for p, what := range used {
		if limit := base + PortBlocks(stages)*devices; p >= limit {
			t.Errorf("%s port %d at or beyond base + PortBlocks·devices = %d, which the stage checks free", what, p, limit)
		}
	}
}
