package shard

import (
	"errors"
	"reflect"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

// TestLayoutOfIsWhatNewBuilds: the layout LayoutOf derives without a
// network is the one New lays every rank's network out with, for a split
// mode, a model that splits itself and data parallel; and its strategy
// file gives the split parameters' slices.
func TestLayoutOfIsWhatNewBuilds(t *testing.T) {
	for _, tc := range []struct {
		model    string
		mode     parallel.Mode
		strategy parallel.Strategy
		split    string // a parameter the layout must split
	}{
		{"semi_auto_net", parallel.SemiAutoParallel, parallel.Strategy{"end_point.matmul": {{2, 1}, {2, 1}}}, "end_point.weight"},
		{"hybrid_net", parallel.HybridParallel, nil, ""},
		{"cnn", parallel.DataParallel, nil, ""},
	} {
		cfg := Config{Model: tc.model, Mode: tc.mode, Strategy: tc.strategy, Devices: 4, BatchPerDevice: 2, Threads: 1}
		got, err := LayoutOf(cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.model, err)
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
			net.Close()
		}
		sf := got.StrategyFile()
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
}
