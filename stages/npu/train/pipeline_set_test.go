package train_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/job"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk/sdktest"
	"github.com/mspipe/mspipe/stages/ckpt/integrate"
	ckptreshard "github.com/mspipe/mspipe/stages/ckpt/reshard"
)

// TestPipelineSetIntegratesAndReshards trains cnn with 2 pipeline stages
// on 4 rank processes (10 steps), with integrated_save true (the first
// rank of each stage saves its stage's whole tensors; strategy.ckpt, the
// protobuf form) and false (every rank its slices; strategy.json), and
// hands the stage's outputs to the checkpoint stages as a pipeline spec
// would (from: checkpoints, strategy: strategy):
//   - the stage's strategy output is the merged file of both stages, the
//     per-stage files beside it;
//   - ckpt/integrate makes one file whose weights and moments are
//     bit-identical to what the run saved (the stage leads' whole tensors,
//     or the ranks' slices put together by each stage's strategy file) and
//     within float rounding of stand_alone on the same global batch;
//   - ckpt/reshard to 4 devices without stages, integrated again, and
//     ckpt/reshard to 1 device give that same file's tensors bit for bit.
func TestPipelineSetIntegratesAndReshards(t *testing.T) {
	dataDir := synthData(t, 16) // 80 images: 10 steps of 8
	aloneDir := t.TempDir()
	mustRun(t, aloneDir, 1, withBlock(dataDir, map[string]any{"mode": "stand_alone", "batch_size": 8}))
	alone := readTensors(t, lastCheckpoint(t, aloneDir, 0))
	keep := func(name string) bool { return isParameter(name) || strings.HasPrefix(name, "moments.") }
	for _, tc := range []struct {
		integrated bool
		strategy   string
	}{
		{true, "strategy.ckpt"},
		{false, "strategy.json"},
	} {
		t.Run(fmt.Sprintf("integrated_save %v", tc.integrated), func(t *testing.T) {
			dir := t.TempDir()
			r := mustRun(t, dir, 4, withBlock(dataDir, map[string]any{
				"mode": "semi_auto_parallel", "batch_size": 4, "pipeline_stages": 2, "micro_size": 2,
				"integrated_save": tc.integrated, "strategy_ckpt_save_file": tc.strategy,
			}))
			strategy := filepath.Join(dir, tc.strategy)
			if got := r.outputs["strategy"]; got != strategy {
				t.Fatalf("strategy output %v, want %s", got, strategy)
			}
			merged, err := parallel.ReadStrategyFile(strategy)
			if err != nil {
				t.Fatal(err)
			}
			if got := merged.Stages(); !slices.Equal(got, []int{0, 1}) {
				t.Errorf("the strategy output describes stages %v, want [0 1]", got)
			}
			for s := range 2 {
				f, err := parallel.ReadStrategyFile(job.StageStrategyFile(strategy, s))
				if err != nil {
					t.Fatalf("stage %d's own strategy file: %v", s, err)
				}
				if f.CurrentStage != s {
					t.Errorf("stage %d's strategy file says current_stage %d", s, f.CurrentStage)
				}
			}

			// What the run holds: the stage leads' whole tensors, or the
			// ranks' slices put together.
			held := map[string]ckpt.Tensor{}
			if tc.integrated {
				for _, rank := range []int{0, 2} {
					for name, tt := range readTensors(t, lastCheckpoint(t, dir, rank)) {
						if keep(name) {
							held[name] = tt
						}
					}
				}
				for _, rank := range []int{1, 3} {
					if entries, _ := os.ReadDir(filepath.Join(dir, fmt.Sprintf("device%d", rank), fmt.Sprintf("ckpt_%d", rank))); len(entries) > 0 {
						t.Errorf("rank %d saved %d files with integrated_save; only each stage's first rank saves", rank, len(entries))
					}
				}
			} else {
				held = assembleStages(t, dir, 4, 2, tc.strategy)
			}

			whole := integrateSet(t, map[string]any{"from": dir, "strategy": strategy})
			var n int
			for name, tt := range whole {
				if !keep(name) {
					continue
				}
				n++
				h, ok := held[name]
				if !ok || !bytes.Equal(h.Data, tt.Data) || fmt.Sprint(h.Dims) != fmt.Sprint(tt.Dims) {
					t.Errorf("integrated %s%v differs from what the run saved (%v)", name, tt.Dims, h.Dims)
				}
			}
			if n != len(held) || n == 0 {
				t.Errorf("integrated %d weights and moments, the run saved %d", n, len(held))
			}
			if fmt.Sprint(whole["global_step"].Data) != fmt.Sprint([]byte{10, 0, 0, 0}) {
				t.Errorf("integrated global_step %v, want 10", whole["global_step"].Data)
			}
			t.Logf("largest relative difference from stand_alone %.3g", compareTensors(t, whole, alone, keep))

			// 4 (pipeline) -> 4 without stages -> 1, and 4 (pipeline) -> 1.
			plain := reshardSet(t, map[string]any{"from": dir, "devices": 4})
			again := integrateSet(t, map[string]any{"from": plain})
			one := reshardSet(t, map[string]any{"from": dir, "devices": 1})
			oneFile := readTensors(t, lastCheckpoint(t, one, 0))
			for _, c := range []struct {
				what string
				got  map[string]ckpt.Tensor
			}{{"4 (pipeline) -> 4 -> 1", again}, {"4 (pipeline) -> 1 device", oneFile}} {
				if len(c.got) != len(whole) {
					t.Errorf("%s: %d tensors, the integrated set %d", c.what, len(c.got), len(whole))
				}
				for name, tt := range whole {
					g, ok := c.got[name]
					if !ok || !bytes.Equal(g.Data, tt.Data) || fmt.Sprint(g.Dims) != fmt.Sprint(tt.Dims) || g.DType != tt.DType {
						t.Errorf("%s: %s differs from the integrated set", c.what, name)
					}
				}
			}
		})
	}
}

// integrateSet runs the ckpt/integrate stage and reads its checkpoint.
func integrateSet(t *testing.T, with map[string]any) map[string]ckpt.Tensor {
	t.Helper()
	r := sdktest.Run(context.Background(), t, integrate.New(), plugins.RunRequest{StageID: "integrate", With: with, WorkDir: t.TempDir()})
	if r.Err != nil {
		t.Fatalf("ckpt/integrate %v: %v", with, r.Err)
	}
	path, _ := r.Outputs["checkpoint"].(string)
	return readTensors(t, path)
}

// reshardSet runs the ckpt/reshard stage and returns its set directory.
func reshardSet(t *testing.T, with map[string]any) string {
	t.Helper()
	r := sdktest.Run(context.Background(), t, ckptreshard.New(), plugins.RunRequest{StageID: "reshard", With: with, WorkDir: t.TempDir()})
	if r.Err != nil {
		t.Fatalf("ckpt/reshard %v: %v", with, r.Err)
	}
	dir, _ := r.Outputs["checkpoints"].(string)
	return dir
}
