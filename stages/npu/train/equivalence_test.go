package train_test

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
)

// equivalenceTolerance bounds the relative difference ‖dp−sa‖/‖sa‖ of
// every checkpoint tensor between a data-parallel job and the stand_alone
// job on the same global batches. Both compute the same mean gradient and
// differ only in the order float32 additions are made (a mean of n
// per-device means instead of one mean over the global batch): a few ulps
// per step (float32's epsilon is 6e-8), carried forward by momentum —
// measured 3.5e-6 (2 devices) and 5e-6 (4 devices) here. A wrong reduction
// changes the update itself: summing instead of averaging, or skipping the
// AllReduce, moves every parameter tensor by 4e-2 to 4 relative (measured).
// 1e-4 leaves a factor 20 above rounding and 400 below the smallest wrong
// result. The learning rate is kept small on purpose: at 0.05 rounding
// flips one ReLU or max-pool decision at step 8 of the 4-device job and the
// difference jumps to 1e-3. Training is deterministic (one thread, fixed
// reduction order), so a configuration without such a flip keeps it.
const equivalenceTolerance = 1e-4

// TestDataParallelStageEqualsStandAlone runs the real npu/train stage on 2
// and 4 devices with batch_size 4 and compares every rank's final
// checkpoint with stand_alone trained with batch_size 8 and 16 on the same
// data: parameters and optimizer moments agree within float32 rounding,
// the global step is the same, all ranks of a job hold bit-identical
// parameters, and the tcp transport gives the bits shared memory gives.
func TestDataParallelStageEqualsStandAlone(t *testing.T) {
	dataDir := synthData(t, 48) // 240 images: 30 global batches of 8, 15 of 16
	for _, devices := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d devices", devices), func(t *testing.T) {
			aloneDir := t.TempDir()
			mustRun(t, aloneDir, 1, withBlock(dataDir, map[string]any{"mode": "stand_alone", "batch_size": 4 * devices}))
			want := readTensors(t, lastCheckpoint(t, aloneDir, 0))

			dpDir := t.TempDir()
			r := mustRun(t, dpDir, devices, withBlock(dataDir, map[string]any{"mode": "data_parallel", "batch_size": 4}))
			if got, wantSteps := r.outputs["global_step"], 240/(4*devices); fmt.Sprint(got) != fmt.Sprint(wantSteps) {
				t.Errorf("global_step output %v, want %d", got, wantSteps)
			}
			rank0 := readTensors(t, lastCheckpoint(t, dpDir, 0))
			worst := compareTensors(t, rank0, want, nil)
			t.Logf("largest relative difference from stand_alone: %.3g", worst)

			if devices == 2 {
				// gradients_mean: false sums the two ranks' gradients, which
				// with momentum SGD is stand_alone at twice the learning rate.
				sumDir := t.TempDir()
				mustRun(t, sumDir, devices, withBlock(dataDir, map[string]any{"mode": "data_parallel", "batch_size": 4,
					"gradients_mean": false, "learning_rate": 0.005}))
				t.Logf("gradients_mean false at half the rate: largest relative difference %.3g",
					compareTensors(t, readTensors(t, lastCheckpoint(t, sumDir, 0)), want, isParameter))

				// Over TCP the ranks reduce in the same fixed order as over
				// shared memory (the default on one host): the same bits.
				tcpDir := t.TempDir()
				mustRun(t, tcpDir, devices, withBlock(dataDir, map[string]any{"mode": "data_parallel", "batch_size": 4, "collective_transport": "tcp"}))
				overTCP := readTensors(t, lastCheckpoint(t, tcpDir, 0))
				for _, name := range sortedNames(rank0) {
					if !bytes.Equal(rank0[name].Data, overTCP[name].Data) {
						t.Errorf("%s differs between the tcp and shm transports", name)
					}
				}
			}
			for rank := 1; rank < devices; rank++ {
				other := readTensors(t, lastCheckpoint(t, dpDir, rank))
				for _, name := range sortedNames(rank0) {
					if !bytes.Equal(rank0[name].Data, other[name].Data) {
						t.Errorf("rank %d's %s differs from rank 0's: the AllReduce must leave every rank the same gradients", rank, name)
					}
				}
			}
		})
	}
}

// compareTensors checks that got holds the tensors of want (those keep
// accepts; nil: all) with the same shapes, integers equal and floats within
// equivalenceTolerance, and returns the largest relative difference.
func compareTensors(t *testing.T, got, want map[string]ckpt.Tensor, keep func(name string) bool) float64 {
	t.Helper()
	var names []string
	for _, name := range sortedNames(want) {
		if keep == nil || keep(name) {
			names = append(names, name)
		}
	}
	if keep == nil && len(got) != len(want) {
		t.Errorf("%d tensors, want %d", len(got), len(want))
	}
	worst := 0.0
	for _, name := range names {
		w, g := want[name], got[name]
		if g.DType != w.DType || fmt.Sprint(g.Dims) != fmt.Sprint(w.Dims) {
			t.Errorf("%s: %s%v, want %s%v", name, g.DType, g.Dims, w.DType, w.Dims)
			continue
		}
		if w.DType != ckpt.DTypeFloat32 {
			if !bytes.Equal(g.Data, w.Data) {
				t.Errorf("%s differs", name)
			}
			continue
		}
		wv, err := w.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		gv, err := g.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		var diff, norm float64
		for i := range wv {
			d := float64(gv[i]) - float64(wv[i])
			diff += d * d
			norm += float64(wv[i]) * float64(wv[i])
		}
		rel := math.Sqrt(diff) / math.Max(math.Sqrt(norm), 1e-30)
		if !(rel <= equivalenceTolerance) {
			t.Errorf("%s: relative difference %.3g from stand_alone, above %g", name, rel, equivalenceTolerance)
		}
		worst = math.Max(worst, rel)
	}
	return worst
}

func sortedNames(tensors map[string]ckpt.Tensor) []string {
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// isParameter tells the model's parameters from the optimizer's state in a
// checkpoint.
func isParameter(name string) bool {
	switch name {
	case "global_step", "learning_rate", "momentum":
		return false
	}
	return !strings.HasPrefix(name, "moments.")
}
