package shard

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

// TestLayoutOfIsWhatNewBuilds: the layout LayoutOf derives without a
// network is the one New lays every rank's network out with, for a split
// mode, a model that splits itself and data parallel, and with the
// parallel optimizer (the parameters it splits, and each one's entry);
// and its strategy file gives the split parameters' slices.
func TestLayoutOfIsWhatNewBuilds(t *testing.T) {
	for _, tc := range []struct {
		model    string
		mode     parallel.Mode
		strategy parallel.Strategy
		split    string // a parameter the layout must split
		// optimizer, shardSize: the parallel optimizer on (with that
		// optimizer_weight_shard_size), and the parameters it must split,
		// each with opt_weight_shard_step and opt_weight_shard_size.
		optimizer bool
		shardSize int
		optSplit  map[string][2]int
	}{
		{model: "semi_auto_net", mode: parallel.SemiAutoParallel, strategy: parallel.Strategy{"end_point.matmul": {{2, 1}, {2, 1}}}, split: "end_point.weight"},
		{model: "hybrid_net", mode: parallel.HybridParallel},
		{model: "cnn", mode: parallel.DataParallel},
		// end_point.weight [10 128] and end_point.bias [10]: 10 rows do
		// not divide into 4 pieces (they do into 2).
		{model: "semi_auto_net", mode: parallel.DataParallel, optimizer: true,
			optSplit: map[string][2]int{"fc.weight": {1, 4}}},
		{model: "semi_auto_net", mode: parallel.SemiAutoParallel, strategy: parallel.Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, split: "fc.weight", optimizer: true,
			optSplit: map[string][2]int{"fc.weight": {2, 2}}},
		{model: "semi_auto_net", mode: parallel.DataParallel, optimizer: true, shardSize: 2,
			optSplit: map[string][2]int{"fc.weight": {1, 2}, "end_point.weight": {1, 2}, "end_point.bias": {1, 2}}},
		// The BatchNorm moving statistics are frozen: the optimizer leaves
		// them whole while it splits gamma and beta beside them.
		{model: "resnet20", mode: parallel.DataParallel, optimizer: true, optSplit: map[string][2]int{
			"bn1.gamma": {1, 4}, "bn1.beta": {1, 4}, "conv1.weight": {1, 4}, "layer2.0.down_sample_layer.1.gamma": {1, 4}}},
	} {
		cfg := Config{Model: tc.model, Mode: tc.mode, Strategy: tc.strategy, Devices: 4, BatchPerDevice: 2, Threads: 1,
			ParallelOptimizer: tc.optimizer, OptimizerShardSize: tc.shardSize}
		got, err := LayoutOf(cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.model, err)
		}
		for name, want := range tc.optSplit {
			if l, ok := got.Optimizer[name]; !ok || l.OptWeightShardStep != want[0] || l.OptWeightShardSize != want[1] {
				t.Errorf("%s %s: %s's optimizer split %+v (split %v), want opt_weight_shard_step %d and opt_weight_shard_size %d", tc.model, tc.mode, name, l, ok, want[0], want[1])
			}
		}
		if len(got.Optimizer) != len(tc.optSplit) && tc.model != "resnet20" {
			t.Errorf("%s %s: the parallel optimizer splits %d parameters, want %d", tc.model, tc.mode, len(got.Optimizer), len(tc.optSplit))
		}
		for name := range got.Params {
			if _, split := got.Optimizer[name]; split && strings.Contains(name, ".moving_") {
				t.Errorf("%s: the parallel optimizer splits the frozen %s", tc.model, name)
			}
		}
		if !tc.optimizer && len(got.Optimizer) > 0 {
			t.Errorf("%s without the parallel optimizer: it splits %v", tc.model, got.Optimizer)
		}
		comms := memComms(4)
		for r := range 4 {
			cfg.Rank, cfg.Comm = r, comms[r]
			net, err := New(cfg)
			if err != nil {
				t.Fatalf("%s rank %d: %v", tc.model, r, err)
			}
			if !reflect.DeepEqual(got.Params, net.Layouts()) || !reflect.DeepEqual(got.Ops, net.OpLayouts()) {
				t.Errorf("%s rank %d: LayoutOf differs from the network New builds", tc.model, r)
			}
			if !reflect.DeepEqual(got.Optimizer, net.OptimizerLayouts()) {
				t.Errorf("%s rank %d: LayoutOf's optimizer split %v differs from the network's %v", tc.model, r, got.Optimizer, net.OptimizerLayouts())
			}
			// Each rank's pieces are the boxes of the strategy file's
			// entries: what a reshard to that file writes for the rank.
			for name, box := range net.PieceBoxes() {
				boxes, err := got.Optimizer[name].Boxes(got.Params[name].Shape)
				if err != nil || !reflect.DeepEqual(boxes[r], box) {
					t.Errorf("%s rank %d: %s's piece %v, the strategy file's %v (%v)", tc.model, r, name, box, boxes, err)
				}
			}
			net.Close()
		}
		sf := got.StrategyFile()
		for name, l := range got.Optimizer {
			if !reflect.DeepEqual(sf.Layouts[name], l) {
				t.Errorf("%s: strategy file entry of %s %+v, want the optimizer split %+v", tc.model, name, sf.Layouts[name], l)
			}
		}
		if len(sf.Layouts) != len(got.Params) || len(sf.Layouts) == 0 {
			t.Fatalf("%s: %d layouts in the strategy file, %d parameters", tc.model, len(sf.Layouts), len(got.Params))
		}
		if tc.split != "" {
			l := got.Params[tc.split]
			if sh, err := l.SliceShape(); err != nil || reflect.DeepEqual(sh, l.Shape) {
				t.Errorf("%s: %s slice %v of %v, want it split (%v)", tc.model, tc.split, sh, l.Shape, err)
			}
		}
	}
	if _, err := LayoutOf(Config{Model: "cnn", Mode: parallel.StandAlone, Devices: 2, BatchPerDevice: 1}); !errors.Is(err, ErrConfig) {
		t.Errorf("stand_alone on 2 devices: %v", err)
	}
	if _, err := LayoutOf(Config{Model: "semi_auto_net", Mode: parallel.SemiAutoParallel, Strategy: parallel.Strategy{"end_point.matmul": {{3, 1}, {1, 1}}}, Devices: 4, BatchPerDevice: 2}); err == nil {
		t.Error("a strategy for 3 devices on 4 was accepted")
	}
	if _, err := LayoutOf(Config{Model: "hybrid_net", Mode: parallel.HybridParallel, Devices: 4, BatchPerDevice: 2, ParallelOptimizer: true}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "parallel optimizer") {
		t.Errorf("hybrid_parallel with the parallel optimizer: %v", err)
	}
}

// TestPipelineLayoutOfIsWhatNewBuilds: PipelineLayoutOf derives every
// stage's layout as the stage's ranks build it (New with their stage, on
// the stage group's devices): the stage's operators and parameters only,
// split by the strategy, and the strategy file the stage's first rank
// writes (current_stage included), for the default cut and for a
// pipeline_stage assignment.
func TestPipelineLayoutOfIsWhatNewBuilds(t *testing.T) {
	strategy := parallel.Strategy{"conv1": {{2, 1, 1, 1}, {1, 1, 1, 1}}, "conv2": {{1, 1, 1, 1}, {2, 1, 1, 1}}}
	for _, tc := range []struct {
		assign map[string]int
		stage1 []string // the parameters of stage 1
	}{
		{nil, []string{"conv2.bias", "conv2.weight", "end_point.bias", "end_point.weight"}},
		{map[string]int{"end_point.matmul": 1}, []string{"end_point.bias", "end_point.weight"}},
	} {
		cfg := Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Strategy: strategy, Devices: 2, BatchPerDevice: 8, FullBatch: true, Threads: 1,
			Pipeline: Pipeline{Stages: 2, Micro: 4, Assign: tc.assign}}
		stages, err := PipelineLayoutOf(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(maps.Keys(stages[1].Params)); !slices.Equal(got, tc.stage1) {
			t.Errorf("assign %v: stage 1 holds %v, want %v", tc.assign, got, tc.stage1)
		}
		for s, l := range stages {
			if l.Stage != s || l.StrategyFile().CurrentStage != s {
				t.Errorf("assign %v: stage %d's layout says stage %d, its file current_stage %d", tc.assign, s, l.Stage, l.StrategyFile().CurrentStage)
			}
			for name := range l.Params {
				if _, other := stages[1-s].Params[name]; other {
					t.Errorf("assign %v: %s in both stages", tc.assign, name)
				}
			}
			comms := memComms(2)
			for r := range 2 {
				c := cfg
				c.Rank, c.Comm, c.Pipeline.Stage = r, comms[r], s
				if s == 0 {
					c.Pipeline.Next = nopLink{}
				} else {
					c.Pipeline.Prev = nopLink{}
				}
				net, err := New(c)
				if err != nil {
					t.Fatalf("stage %d rank %d: %v", s, r, err)
				}
				if !reflect.DeepEqual(l.Params, net.Layouts()) || !reflect.DeepEqual(l.Ops, net.OpLayouts()) {
					t.Errorf("assign %v stage %d rank %d: PipelineLayoutOf differs from the network New builds", tc.assign, s, r)
				}
				if !reflect.DeepEqual(l.StrategyFile(), net.StrategyFile()) {
					t.Errorf("assign %v stage %d rank %d: strategy file %+v, the network's %+v", tc.assign, s, r, l.StrategyFile(), net.StrategyFile())
				}
				net.Close()
			}
		}
		// conv2's weight is split in halves where it runs.
		if tc.assign == nil {
			if sh, err := stages[1].Params["conv2.weight"].SliceShape(); err != nil || !slices.Equal(sh, []int{16, 16, 3, 3}) {
				t.Errorf("conv2.weight slice %v (%v), want [16 16 3 3]", sh, err)
			}
		}
	}
	if _, err := PipelineLayoutOf(Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Devices: 2, BatchPerDevice: 8, FullBatch: true}); !errors.Is(err, ErrConfig) {
		t.Errorf("no pipeline: %v", err)
	}
	if _, err := PipelineLayoutOf(Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Devices: 2, BatchPerDevice: 8, FullBatch: true, Pipeline: Pipeline{Stages: 2, Micro: 3}}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "does not split into 3 micro-batches") {
		t.Errorf("8 images in 3 micro-batches: %v", err)
	}
}
