package optim

import (
	"errors"
	"math"
	"testing"

	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/tensor"
)

func param(t *testing.T, name string, values ...float32) *nn.Param {
	t.Helper()
	v, err := tensor.FromSlice(append([]float32(nil), values...), len(values))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tensor.New(len(values))
	if err != nil {
		t.Fatal(err)
	}
	return &nn.Param{Name: name, Value: v, Grad: g, Trainable: true}
}

// TestMomentumThreeSteps replays three steps computed by hand from
// MindSpore's ApplyMomentum rule with a constant gradient (0.5, 0.25).
func TestMomentumThreeSteps(t *testing.T) {
	tests := []struct {
		name    string
		param   string
		cfg     MomentumConfig
		want    [3][2]float64
		moment3 [2]float64
		steps   int // 3 unless set
	}{
		{
			// accum: 0.5 → 0.95 → 1.355; param −= 0.1·accum.
			name: "plain", param: "conv.weight",
			cfg:     MomentumConfig{LearningRates: []float32{0.1}, Momentum: 0.9},
			want:    [3][2]float64{{0.95, -2.025}, {0.855, -2.0725}, {0.7195, -2.14025}},
			moment3: [2]float64{1.355, 0.6775},
		},
		{
			// g = grad + 0.01·param: 0.51, then 0.5 + 0.00949 = 0.50949, ...
			name: "weight_decay", param: "conv.weight", steps: 2,
			cfg: MomentumConfig{LearningRates: []float32{0.1}, Momentum: 0.9, WeightDecay: 0.01},
			want: [3][2]float64{
				{1 - 0.1*0.51, -2 - 0.1*(0.25-0.02)},
				{0.949 - 0.1*(0.9*0.51+0.50949), -2.023 - 0.1*(0.9*0.23+0.25-0.02023)},
			},
		},
		{
			// gamma is not decayed by MindSpore's default filter.
			name: "gamma_not_decayed", param: "bn1.gamma",
			cfg:     MomentumConfig{LearningRates: []float32{0.1}, Momentum: 0.9, WeightDecay: 0.01},
			want:    [3][2]float64{{0.95, -2.025}, {0.855, -2.0725}, {0.7195, -2.14025}},
			moment3: [2]float64{1.355, 0.6775},
		},
		{
			// Nesterov: param −= lr·g + lr·momentum·accum.
			name: "nesterov", param: "conv.weight",
			cfg: MomentumConfig{LearningRates: []float32{0.1}, Momentum: 0.9, UseNesterov: true},
			want: [3][2]float64{
				{1 - (0.05 + 0.09*0.5), -2 - (0.025 + 0.09*0.25)},
				{0.905 - (0.05 + 0.09*0.95), -2.0475 - (0.025 + 0.09*0.475)},
				{0.7695 - (0.05 + 0.09*1.355), -2.11525 - (0.025 + 0.09*0.6775)},
			},
			moment3: [2]float64{1.355, 0.6775},
		},
		{
			// A per-step schedule: 0.1, 0.05, then 0.01.
			name: "schedule", param: "conv.weight",
			cfg:     MomentumConfig{LearningRates: []float32{0.1, 0.05, 0.01}, Momentum: 0.9},
			want:    [3][2]float64{{0.95, -2.025}, {0.95 - 0.05*0.95, -2.025 - 0.05*0.475}, {0.9025 - 0.01*1.355, -2.04875 - 0.01*0.6775}},
			moment3: [2]float64{1.355, 0.6775},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := param(t, tt.param, 1, -2)
			o, err := NewMomentum([]*nn.Param{p}, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			steps := 3
			if tt.steps > 0 {
				steps = tt.steps
			}
			for s := 0; s < steps; s++ {
				copy(p.Grad.Data(), []float32{0.5, 0.25})
				o.Step()
				for i, w := range tt.want[s] {
					if got := p.Value.Data()[i]; math.Abs(float64(got)-w) > 2e-6 {
						t.Fatalf("step %d: param %v, want %v", s+1, p.Value.Data(), tt.want[s])
					}
				}
			}
			if o.GlobalStep() != steps {
				t.Fatalf("global step %d, want %d", o.GlobalStep(), steps)
			}
			if steps == 3 {
				for i, w := range tt.moment3 {
					if got := o.Moments()[i]; math.Abs(float64(got)-w) > 2e-6 {
						t.Fatalf("moments %v, want %v", o.Moments(), tt.moment3)
					}
				}
			}
		})
	}
}

func TestMomentumState(t *testing.T) {
	w, b := param(t, "end_point.weight", 1, 2), param(t, "end_point.bias", 3)
	o, err := NewMomentum([]*nn.Param{w, b}, MomentumConfig{LearningRates: []float32{0.01}, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	st := o.State()
	names := []string{"global_step", "learning_rate", "momentum", "moments.end_point.weight", "moments.end_point.bias"}
	if len(st) != len(names) {
		t.Fatalf("%d state tensors, want %d", len(st), len(names))
	}
	for i, n := range names {
		if st[i].Name != n {
			t.Fatalf("state %d is %s, want %s", i, st[i].Name, n)
		}
	}
	if st[0].DType != "Int32" || st[0].I32 == nil || st[1].F32[0] != 0.01 || st[2].F32[0] != 0.9 || st[3].Shape[0] != 2 {
		t.Fatalf("state %+v", st)
	}
	copy(w.Grad.Data(), []float32{1, 1})
	o.Step()
	if st[0].I32[0] != 1 || st[3].F32[0] != 1 {
		t.Fatalf("state does not alias the optimizer: %+v", st)
	}
	// Restoring through the aliases: a later step continues from them.
	st[0].I32[0] = 7
	st[3].F32[0] = 10
	o.Step()
	if o.GlobalStep() != 8 || o.Moments()[0] != 10*0.9+1 {
		t.Fatalf("after restore: step %d moments %v", o.GlobalStep(), o.Moments())
	}
	if allocs := testing.AllocsPerRun(10, o.Step); allocs != 0 {
		t.Fatalf("Step allocates %v times", allocs)
	}
}

func TestMomentumConfigErrors(t *testing.T) {
	p := param(t, "w", 1)
	frozen := &nn.Param{Name: "bn.moving_mean", Value: p.Value}
	for _, tc := range []struct {
		name   string
		params []*nn.Param
		cfg    MomentumConfig
	}{
		{"no_params", nil, MomentumConfig{LearningRates: []float32{0.1}}},
		{"no_lr", []*nn.Param{p}, MomentumConfig{}},
		{"negative_lr", []*nn.Param{p}, MomentumConfig{LearningRates: []float32{-1}}},
		{"nan_momentum", []*nn.Param{p}, MomentumConfig{LearningRates: []float32{0.1}, Momentum: float32(math.NaN())}},
		{"negative_decay", []*nn.Param{p}, MomentumConfig{LearningRates: []float32{0.1}, WeightDecay: -1}},
		{"frozen_param", []*nn.Param{frozen}, MomentumConfig{LearningRates: []float32{0.1}}},
	} {
		if _, err := NewMomentum(tc.params, tc.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", tc.name, err)
		}
	}
	if !DefaultDecay("layer1.0.conv1.weight") || !DefaultDecay("end_point.bias") || DefaultDecay("bn1.beta") || DefaultDecay("layer1.0.bn1.gamma") {
		t.Fatal("DefaultDecay differs from MindSpore's filter")
	}
}
