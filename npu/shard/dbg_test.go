package shard

import (
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

func TestDbgGrowth(t *testing.T) {
	const global = 8
	for _, c := range []struct {
		lr   float32
		data uint64
	}{{0.005, 22}, {0.005, 23}, {0.001, 21}, {0.001, 24}} {
		xs, ys := batches(10, global, c.data)
		base := Config{Model: "resnet20", Mode: parallel.StandAlone, Devices: 1, BatchPerDevice: global, GradientsMean: true, Seed: 4, Threads: 1}
		alone := trainRanksAt(t, c.lr, base, nil, xs, ys)
		cfg := base
		cfg.Mode, cfg.Devices, cfg.DatasetStrategy, cfg.Strategy = parallel.SemiAutoParallel, 2, [][]int{{1, 1, 2, 1}, {1}}, wholeBlocks(t, "resnet20", global)
		res := trainRanksAt(t, c.lr, cfg, memComms(2), xs, ys)
		worst, wname := 0.0, ""
		for name, w := range alone.gathered {
			if d := relDiff(res.gathered[name], w); d > worst {
				worst, wname = d, name
			}
		}
		t.Logf("%+v: worst %s %.3g", c, wname, worst)
	}
}
