package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
)

// TestParallelOptimizerEqualsWithout trains semi_auto_net for 10 steps on
// 2, 4 and 8 in-process ranks, in data_parallel and with several
// strategies, with and without the parallel optimizer (whole groups, and
// a shard size of 2): the gathered parameters are bit-identical, and
// every optimizer-sharded parameter's piece is a 1/size part of its slice.
func TestParallelOptimizerEqualsWithout(t *testing.T) {
	const global, steps = 16, 10
	xs, ys := batches(steps, global, 3)
	for _, d := range []int{2, 4, 8} {
		for _, st := range []parallel.Strategy{
			nil,
			{"fc.matmul": {{1, 1}, {1, 2}}},
			{"fc.matmul": {{2, 1}, {1, 1}}},
			{"end_point.matmul": {{1, 2}, {1, 2}}},
			{"end_point.matmul": {{1, 1}, {2, 1}}},
		} {
			mode := parallel.SemiAutoParallel
			if st == nil {
				mode = parallel.DataParallel
			}
			base := Config{Model: "semi_auto_net", Mode: mode, Devices: d, BatchPerDevice: global / d, GradientsMean: true, Seed: 7, Threads: 1, Strategy: st}
			t.Run(fmt.Sprintf("%d ranks %v", d, st), func(t *testing.T) {
				plain := trainRanks(t, base, memComms(d), xs, ys)
				for _, size := range []int{0, 2} {
					cfg := base
					cfg.ParallelOptimizer, cfg.OptimizerShardSize = true, size
					res := trainRanks(t, cfg, memComms(d), xs, ys)
					for name, want := range plain.gathered {
						if !bytes.Equal(floatBytes(res.gathered[name]), floatBytes(want)) {
							t.Errorf("shard size %d: %s differs from the run without the parallel optimizer", size, name)
						}
					}
					net := res.nets[d-1]
					if len(net.optShards) == 0 {
						t.Fatalf("shard size %d: no parameter is optimizer-sharded", size)
					}
					for _, s := range net.optShards {
						if s.piece.Value.Len()*s.layout.OptWeightShardSize != s.full.Value.Len() {
							t.Errorf("%s: piece %v of slice %v, want 1/%d of it", s.full.Name, s.piece.Shape(), s.full.Shape(), s.layout.OptWeightShardSize)
						}
						if size == 2 && s.layout.OptWeightShardSize != 2 {
							t.Errorf("%s: opt_weight_shard_size %d, want 2", s.full.Name, s.layout.OptWeightShardSize)
						}
					}
				}
			})
		}
	}
}

func floatBytes(v []float32) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, v)
	return b.Bytes()
}

// A shard size that does not divide a parameter's data-parallel group is
// refused when the network is laid out, naming the parameter (the rule is
// parallel.OptimizerPieces's); the parallel optimizer is refused in
// stand_alone and hybrid_parallel.
func TestParallelOptimizerRefusals(t *testing.T) {
	_, err := New(Config{Model: "semi_auto_net", Mode: parallel.DataParallel, Devices: 4, Comm: memComms(4)[0], BatchPerDevice: 2, Threads: 1,
		ParallelOptimizer: true, OptimizerShardSize: 3})
	if !errors.Is(err, ErrConfig) || !errors.Is(err, parallel.ErrOptimizerShard) || !strings.Contains(err.Error(), "fc.weight is repeated on 4 ranks, which optimizer_weight_shard_size 3 does not divide") {
		t.Errorf("shard size 3 of a group of 4: %v", err)
	}
	for _, mode := range []parallel.Mode{parallel.StandAlone, parallel.HybridParallel} {
		_, err := New(Config{Model: "hybrid_net", Mode: mode, Devices: 1, BatchPerDevice: 4, ParallelOptimizer: true})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "parallel optimizer") {
			t.Errorf("%s: %v", mode, err)
		}
	}
}
