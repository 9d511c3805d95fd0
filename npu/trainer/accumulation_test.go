package trainer

import (
	"context"
	"math"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
)

func tensorsOf(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	tensors, err := ckpt.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, tt := range tensors {
		if v, err := tt.Float32s(); err == nil && tt.DType == ckpt.DTypeFloat32 {
			out[tt.Name] = v
		}
	}
	return out
}

// TestGradAccumulationEqualsLargerBatch trains the BatchNorm-free CNN for
// 20 steps twice on the same 320 images: with batches of 32, and with
// micro-batches of 8 accumulated 4 at a time (the seeds' run_grad_accu.sh).
// Each step sees the same 32 images either way, so every parameter and
// momentum agrees within float32 rounding.
func TestGradAccumulationEqualsLargerBatch(t *testing.T) {
	dataDir := tinyData(t, 64)
	whole := t.TempDir()
	if _, err := Train(context.Background(), equivalenceConfig(dataDir, whole, 32)); err != nil {
		t.Fatal(err)
	}
	micro := t.TempDir()
	cfg := equivalenceConfig(dataDir, micro, 8)
	cfg.GradAccumulation = 4
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.StepsPerEpoch != 10 || res.GlobalStep != 20 {
		t.Fatalf("%d steps per epoch, global step %d: want 10 and 20", res.StepsPerEpoch, res.GlobalStep)
	}
	want, got := finalTensors(t, whole), finalTensors(t, micro)
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("%d tensors accumulated, %d whole", len(got), len(want))
	}
	worst := 0.0
	for name, w := range want {
		g := got[name]
		var diff, norm float64
		for i := range w {
			d := float64(g[i]) - float64(w[i])
			diff += d * d
			norm += float64(w[i]) * float64(w[i])
		}
		rel := math.Sqrt(diff) / math.Max(math.Sqrt(norm), 1e-30)
		if rel > 1e-5 {
			t.Errorf("%s: relative difference %.3g > 1e-5", name, rel)
		}
		worst = math.Max(worst, rel)
	}
	t.Logf("largest relative difference: %.3g", worst)

	// Without accumulation, batches of 8 give a different (4× as many
	// steps) training: the comparison above is not vacuous.
	plain := t.TempDir()
	cfg = equivalenceConfig(dataDir, plain, 8)
	cfg.MaxSteps = 20
	pres, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := tensorsOf(t, pres.Checkpoint)
	if w, o := want["end_point.weight"], other["end_point.weight"]; len(o) == len(w) && math.Abs(float64(o[0]-w[0])) < 1e-7 && math.Abs(float64(o[1]-w[1])) < 1e-7 {
		t.Errorf("batches of 8 without accumulation end where batches of 32 do: the test cannot tell them apart")
	}
}
