package optim

import (
	"fmt"
	"math"
)

// Schedule describes a learning-rate schedule of MindSpore's ResNet example
// (model_zoo official/cv/ResNet/src/lr_generator.py, get_lr). Rates are
// computed in float64 and stored as float32, one per step.
type Schedule struct {
	// Mode is one of
	//   constant: LRMax at every step (a single value);
	//   steps:    linear warmup LRInit→LRMax, then LRMax, ×0.1, ×0.01, ×0.001
	//             from 30%, 60%, 80% of the steps;
	//   step:     LRMax, ×0.1, ×0.01, ×0.001 from 20%, 50%, 70% of the
	//             steps, 0.00005 from 90% (no warmup);
	//   poly:     linear warmup, then LRMax·(1−progress)²;
	//   cosine:   linear warmup (ending at LRMax on the last warmup step),
	//             then LRMax·((T−i)/D · ½(1+cos(2π·0.47·i/D)) + 0.00001)
	//             with D the decay steps; with LRInit 0 this is also
	//             warmup_cosine_annealing_lr;
	//   linear:   linear warmup, then linear decay LRMax→LREnd.
	Mode                 string
	LRInit, LREnd, LRMax float64
	WarmupEpochs         int
	TotalEpochs          int
	StepsPerEpoch        int
}

// LearningRates returns the rate of every step of the schedule.
func LearningRates(s Schedule) ([]float32, error) {
	for _, v := range []struct {
		name string
		v    float64
	}{{"lr_init", s.LRInit}, {"lr_end", s.LREnd}, {"lr_max", s.LRMax}} {
		if !(v.v >= 0) || math.IsInf(v.v, 0) {
			return nil, fmt.Errorf("learning rate schedule: %s %g, want finite and >= 0: %w", v.name, v.v, ErrConfig)
		}
	}
	if s.Mode == "constant" {
		return []float32{float32(s.LRMax)}, nil
	}
	if s.TotalEpochs <= 0 || s.StepsPerEpoch <= 0 || s.WarmupEpochs < 0 || s.WarmupEpochs >= s.TotalEpochs {
		return nil, fmt.Errorf("learning rate schedule %s: total epochs %d, steps per epoch %d, warmup epochs %d: want total > warmup >= 0 and steps > 0: %w",
			s.Mode, s.TotalEpochs, s.StepsPerEpoch, s.WarmupEpochs, ErrConfig)
	}
	total, warmup := s.TotalEpochs*s.StepsPerEpoch, s.WarmupEpochs*s.StepsPerEpoch
	if total > 1<<28 {
		return nil, fmt.Errorf("learning rate schedule %s: %d steps: %w", s.Mode, total, ErrConfig)
	}
	var rate func(i int) float64
	warm := func(i int) float64 { return s.LRInit + (s.LRMax-s.LRInit)*float64(i)/float64(warmup) }
	ft, fw := float64(total), float64(warmup)
	switch s.Mode {
	case "steps":
		rate = func(i int) float64 {
			fi := float64(i)
			switch {
			case i < warmup:
				return warm(i)
			case fi < 0.3*ft:
				return s.LRMax
			case fi < 0.6*ft:
				return s.LRMax * 0.1
			case fi < 0.8*ft:
				return s.LRMax * 0.01
			}
			return s.LRMax * 0.001
		}
	case "step":
		rate = func(i int) float64 {
			fi := float64(i)
			switch {
			case fi < 0.2*ft:
				return s.LRMax
			case fi < 0.5*ft:
				return s.LRMax * 0.1
			case fi < 0.7*ft:
				return s.LRMax * 0.01
			case fi < 0.9*ft:
				return s.LRMax * 0.001
			}
			return 0.00005
		}
	case "poly":
		rate = func(i int) float64 {
			if i < warmup {
				return warm(i)
			}
			base := 1 - (float64(i)-fw)/(ft-fw)
			return math.Max(s.LRMax*base*base, 0)
		}
	case "cosine":
		rate = func(i int) float64 {
			if i < warmup {
				return s.LRInit + (s.LRMax-s.LRInit)/fw*float64(i+1)
			}
			decay := ft - fw
			linear := (ft - float64(i)) / decay
			cosine := 0.5 * (1 + math.Cos(math.Pi*2*0.47*float64(i)/decay))
			return s.LRMax * (linear*cosine + 0.00001)
		}
	case "linear":
		rate = func(i int) float64 {
			if i < warmup {
				return warm(i)
			}
			return s.LRMax - (s.LRMax-s.LREnd)*(float64(i)-fw)/(ft-fw)
		}
	default:
		return nil, fmt.Errorf("learning rate schedule: mode %q, want constant, steps, step, poly, cosine or linear: %w", s.Mode, ErrConfig)
	}
	lrs := make([]float32, total)
	for i := range lrs {
		lrs[i] = float32(rate(i))
	}
	return lrs, nil
}
