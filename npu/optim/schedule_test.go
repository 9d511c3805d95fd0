package optim

import (
	"errors"
	"math"
	"testing"
)

func TestLearningRates(t *testing.T) {
	// 10 epochs of 10 steps, 1 warmup epoch; expected values computed with
	// MindSpore's lr_generator.py formulas by hand (float64, then float32).
	base := Schedule{LRInit: 0, LREnd: 0.001, LRMax: 0.1, WarmupEpochs: 1, TotalEpochs: 10, StepsPerEpoch: 10}
	tests := []struct {
		mode string
		want map[int]float64
	}{
		{"steps", map[int]float64{0: 0, 5: 0.05, 10: 0.1, 29: 0.1, 30: 0.01, 59: 0.01, 60: 0.001, 80: 0.0001, 99: 0.0001}},
		{"step", map[int]float64{0: 0.1, 19: 0.1, 20: 0.01, 50: 0.001, 70: 0.0001, 90: 0.00005}},
		{"poly", map[int]float64{5: 0.05, 10: 0.1, 55: 0.025, 99: 1.2345679e-05}},
		{"cosine", map[int]float64{0: 0.01, 9: 0.1, 10: 0.097333463, 50: 0.025841098, 99: 4.16622756e-06}},
		{"linear", map[int]float64{3: 0.03, 10: 0.1, 55: 0.0505, 99: 0.0021}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			s := base
			s.Mode = tt.mode
			lrs, err := LearningRates(s)
			if err != nil {
				t.Fatal(err)
			}
			if len(lrs) != 100 {
				t.Fatalf("%d rates, want 100", len(lrs))
			}
			for i, w := range tt.want {
				if math.Abs(float64(lrs[i])-w) > 1e-7*math.Max(1, w*1e3) {
					t.Errorf("step %d: %g, want %g", i, lrs[i], w)
				}
			}
		})
	}
	c, err := LearningRates(Schedule{Mode: "constant", LRMax: 0.01})
	if err != nil || len(c) != 1 || c[0] != 0.01 {
		t.Fatalf("constant: %v, %v", c, err)
	}
	for _, bad := range []Schedule{
		{Mode: "exponential", LRMax: 0.1, TotalEpochs: 2, StepsPerEpoch: 1},
		{Mode: "cosine", LRMax: 0.1, TotalEpochs: 2, WarmupEpochs: 2, StepsPerEpoch: 1},
		{Mode: "linear", LRMax: 0.1, TotalEpochs: 0, StepsPerEpoch: 1},
		{Mode: "steps", LRMax: -0.1, TotalEpochs: 2, StepsPerEpoch: 1},
		{Mode: "constant", LRMax: math.NaN()},
	} {
		if _, err := LearningRates(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err = %v, want ErrConfig", bad, err)
		}
	}
}
