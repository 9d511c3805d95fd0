package optim

import (
	"fmt"
	"math"
	"strings"

	"github.com/mspipe/mspipe/npu/nn"
)

// MomentumConfig configures Momentum, with the meaning of MindSpore's
// nn.Momentum(params, learning_rate, momentum, weight_decay, use_nesterov).
type MomentumConfig struct {
	// LearningRates holds the rate of every step, indexed by the global step:
	// one value for a constant rate, or a schedule from LearningRates. Past
	// the end the last value is used.
	LearningRates []float32
	Momentum      float32
	WeightDecay   float32
	UseNesterov   bool
	// Decay reports whether a parameter gets weight decay. nil means
	// MindSpore's default filter: names containing neither "beta" nor "gamma"
	// (so BatchNorm scales and shifts are not decayed; biases are).
	Decay func(name string) bool
}

// DefaultDecay is MindSpore's default weight-decay filter.
func DefaultDecay(name string) bool {
	return !strings.Contains(name, "beta") && !strings.Contains(name, "gamma")
}

// StateTensor is one named tensor of optimizer state, as it goes into a
// checkpoint next to the model's parameters. Exactly one of F32 and I32 is
// set, matching DType. The slices alias the optimizer's storage: writing them
// (after checking name, dtype and shape) restores the state.
type StateTensor struct {
	Name  string
	DType string // "Float32" or "Int32"
	Shape []int
	F32   []float32
	I32   []int32
}

// Momentum is MindSpore's Momentum optimizer (ApplyMomentum):
//
//	g     = grad + weight_decay·param   (for parameters the decay filter selects)
//	accum = momentum·accum + g
//	param = param − lr·accum                      (use_nesterov = false)
//	param = param − (lr·g + lr·momentum·accum)    (use_nesterov = true)
//
// with lr the learning rate at the global step, which every Step increments.
type Momentum struct {
	params     []*nn.Param
	decay      []bool
	moments    [][]float32 // per parameter, views of one flat slice
	flat       []float32
	lr         []float32
	momentum   []float32 // one element, saved as "momentum"
	globalStep []int32   // one element, saved as "global_step"
	// scheduleFrom is the global step at which the schedule's first rate
	// applies: 0, or the step a training started from a checkpoint
	// continues (see ScheduleFrom).
	scheduleFrom int
	wd           float32
	nesterov     bool
	state        []StateTensor
}

// NewMomentum builds the optimizer over trainable params (pass
// Model.TrainableParams(), as MindSpore's examples pass the parameters with
// requires_grad). Moments start at zero, the global step at 0.
func NewMomentum(params []*nn.Param, cfg MomentumConfig) (*Momentum, error) {
	if len(params) == 0 {
		return nil, fmt.Errorf("momentum: no parameters: %w", ErrConfig)
	}
	if len(cfg.LearningRates) == 0 {
		return nil, fmt.Errorf("momentum: no learning rate: %w", ErrConfig)
	}
	for i, v := range cfg.LearningRates {
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("momentum: learning rate %d is %g, want finite and >= 0: %w", i, v, ErrConfig)
		}
	}
	if !(cfg.Momentum >= 0) || math.IsInf(float64(cfg.Momentum), 0) {
		return nil, fmt.Errorf("momentum: momentum %g, want finite and >= 0: %w", cfg.Momentum, ErrConfig)
	}
	if !(cfg.WeightDecay >= 0) || math.IsInf(float64(cfg.WeightDecay), 0) {
		return nil, fmt.Errorf("momentum: weight decay %g, want finite and >= 0: %w", cfg.WeightDecay, ErrConfig)
	}
	filter := cfg.Decay
	if filter == nil {
		filter = DefaultDecay
	}
	o := &Momentum{
		params:     params,
		lr:         append([]float32(nil), cfg.LearningRates...),
		momentum:   []float32{cfg.Momentum},
		globalStep: []int32{0},
		wd:         cfg.WeightDecay,
		nesterov:   cfg.UseNesterov,
	}
	total := 0
	for _, p := range params {
		if !p.Trainable || p.Grad == nil {
			return nil, fmt.Errorf("momentum: parameter %s is not trainable: %w", p.Name, ErrConfig)
		}
		total += p.Value.Len()
	}
	o.flat = make([]float32, total)
	o.state = []StateTensor{
		{Name: "global_step", DType: "Int32", Shape: []int{1}, I32: o.globalStep},
		{Name: "learning_rate", DType: nn.DType, Shape: []int{len(o.lr)}, F32: o.lr},
		{Name: "momentum", DType: nn.DType, Shape: []int{1}, F32: o.momentum},
	}
	off := 0
	for _, p := range params {
		n := p.Value.Len()
		m := o.flat[off : off+n : off+n]
		off += n
		o.moments = append(o.moments, m)
		o.decay = append(o.decay, filter(p.Name))
		o.state = append(o.state, StateTensor{Name: "moments." + p.Name, DType: nn.DType,
			Shape: append([]int(nil), p.Shape()...), F32: m})
	}
	return o, nil
}

// LR returns the learning rate the next Step uses.
func (o *Momentum) LR() float32 {
	i := max(int(o.globalStep[0])-o.scheduleFrom, 0)
	return o.lr[min(i, len(o.lr)-1)]
}

// ScheduleFrom makes the learning-rate schedule start at global step
// step: a training that continues another's global step (started from its
// checkpoint) applies its own schedule from its own first step, as a
// MindSpore script that slices its dynamic rate from the step it resumes
// at does.
func (o *Momentum) ScheduleFrom(step int) { o.scheduleFrom = max(step, 0) }

// GlobalStep returns the number of steps taken (or restored).
func (o *Momentum) GlobalStep() int { return int(o.globalStep[0]) }

// Moments returns the accumulators of all parameters as one slice in
// parameter order.
func (o *Momentum) Moments() []float32 { return o.flat }

// State returns the optimizer's checkpoint entries: global_step (Int32 [1]),
// learning_rate (Float32, [1] for a constant rate or one value per step for a
// schedule, as MindSpore keeps a dynamic rate), momentum (Float32 [1]) and
// moments.<parameter name> for every parameter, in parameter order.
func (o *Momentum) State() []StateTensor { return o.state }

// Step updates every parameter from its gradient and increments the global
// step. It does not allocate.
func (o *Momentum) Step() {
	lr, mom, wd := o.LR(), o.momentum[0], o.wd
	for i, p := range o.params {
		w, g, m := p.Value.Data(), p.Grad.Data(), o.moments[i]
		decay := o.decay[i] && wd > 0
		for j := range m {
			gj := g[j]
			if decay {
				gj = w[j]*wd + gj
			}
			m[j] = m[j]*mom + gj
			if o.nesterov {
				w[j] -= gj*lr + m[j]*mom*lr
			} else {
				w[j] -= lr * m[j]
			}
		}
	}
	o.globalStep[0]++
}
