package trainer

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/tensor"
)

// TestEvalEachEpoch trains three epochs with an evaluation after each: the
// first two are reported at their epochs' last global steps and logged,
// the third is the final evaluation, equal to the result's; training is
// the same, bit for bit, as without the evaluations (every checkpoint
// equal); and the evaluations of ranks that each score a part of the test
// set and add up their counts equal one rank's of the whole set.
func TestEvalEachEpoch(t *testing.T) {
	dataDir := tinyData(t, 8) // 40 images: 5 steps of 8 per epoch; 40 test images
	plainDir, evalDir := t.TempDir(), t.TempDir()
	plain := tinyConfig(dataDir, plainDir)
	plain.Model, plain.Epochs, plain.Eval = "cnn", 3, true
	plainRes, err := Train(context.Background(), plain)
	if err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	var got []EvalInfo
	cfg := tinyConfig(dataDir, evalDir)
	cfg.Model, cfg.Epochs, cfg.Eval, cfg.EvalEachEpoch, cfg.Log = "cnn", 3, true, true, &log
	cfg.OnEval = func(e EvalInfo) { got = append(got, e) }
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d evaluations reported, want 3 (after epochs 1 and 2, and the final one): %+v", len(got), got)
	}
	for i, e := range got {
		if e.Epoch != i+1 || e.GlobalStep != 5*(i+1) || e.Final != (i == 2) || e.Accuracy < 0 || e.Accuracy > 1 || !(e.Loss > 0) {
			t.Errorf("evaluation %d: %+v, want epoch %d at global step %d", i, e, i+1, 5*(i+1))
		}
	}
	if got[2].Accuracy != res.Accuracy || got[2].Loss != res.EvalLoss {
		t.Errorf("final evaluation reported %+v, the result says accuracy %v loss %v", got[2], res.Accuracy, res.EvalLoss)
	}
	if res.Accuracy != plainRes.Accuracy || res.EvalLoss != plainRes.EvalLoss || res.Loss != plainRes.Loss {
		t.Errorf("with evaluations after each epoch: accuracy %v loss %v eval loss %v; without: %v %v %v",
			res.Accuracy, res.Loss, res.EvalLoss, plainRes.Accuracy, plainRes.Loss, plainRes.EvalLoss)
	}
	a, b := readAll(t, plainDir), readAll(t, evalDir)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("checkpoints %v without evaluations, %v with", keys(a), keys(b))
	}
	for name, data := range a {
		if !bytes.Equal(data, b[name]) {
			t.Errorf("%s differs when the epochs are evaluated", name)
		}
	}
	for _, e := range got[:2] {
		if line := fmt.Sprintf("eval after epoch %d: accuracy %.4f, loss %.4f\n", e.Epoch, e.Accuracy, e.Loss); !strings.Contains(log.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, log.String())
		}
	}

	// Ranks that share the test set score every image once, and call
	// predict equally often with one shape (a split network's Predict is
	// collective): 40 images in batches of 8 over 3 ranks (a rank without
	// a batch in the second round), in batches of 16 over 2 (a short last
	// batch).
	m, err := NewModel("cnn", 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	whole := &wholeModel{Model: m}
	for _, tc := range []struct{ batch, parts int }{{8, 3}, {16, 2}, {16, 4}} {
		wantC, wantN, wantL, err := evaluatePart(context.Background(), whole.predict, dataDir, tc.batch, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		c, n, l := 0, 0, 0.0
		var calls []string
		for part := range tc.parts {
			var shapes []string
			predict := func(ctx context.Context, x *tensor.Tensor) (*tensor.Tensor, error) {
				shapes = append(shapes, fmt.Sprint(x.Shape()))
				return whole.predict(ctx, x)
			}
			pc, pn, pl, err := evaluatePart(context.Background(), predict, dataDir, tc.batch, part, tc.parts)
			if err != nil {
				t.Fatal(err)
			}
			c, n, l = c+pc, n+pn, l+pl
			calls = append(calls, strings.Join(shapes, " "))
		}
		if c != wantC || n != wantN || n != 40 || fmt.Sprintf("%.3f", l) != fmt.Sprintf("%.3f", wantL) {
			t.Errorf("batch %d, %d parts: scored %d of %d (loss sum %v), the whole set %d of %d (%v), want 40 images", tc.batch, tc.parts, c, n, l, wantC, wantN, wantL)
		}
		for _, cl := range calls[1:] {
			if cl != calls[0] {
				t.Errorf("batch %d, %d parts: the ranks' predict calls differ: %q", tc.batch, tc.parts, calls)
				break
			}
		}
	}
}
