package parallel

import (
	"fmt"
	"strings"
)

// Mode is MindSpore's parallel_mode. The zero value is StandAlone, the
// default.
type Mode uint8

// The modes, named as MindSpore's context.set_auto_parallel_context names
// them.
const (
	// StandAlone trains on one device.
	StandAlone Mode = iota
	// DataParallel trains a full replica on every device, each on its
	// shard of the data, and all-reduces the gradients.
	DataParallel
	// SemiAutoParallel splits operators by user-given shard strategies.
	SemiAutoParallel
	// AutoParallel searches the shard strategies with a cost model.
	AutoParallel
	// HybridParallel leaves the split (layerwise_parallel parameters and
	// explicit AllReduce) to the model.
	HybridParallel
	modeCount
)

var modeNames = [modeCount]string{"stand_alone", "data_parallel", "semi_auto_parallel", "auto_parallel", "hybrid_parallel"}

// Modes returns every mode in declaration order.
func Modes() []Mode {
	out := make([]Mode, modeCount)
	for i := range out {
		out[i] = Mode(i)
	}
	return out
}

// ParseMode returns the mode named s, e.g. "data_parallel".
func ParseMode(s string) (Mode, error) {
	for i, name := range modeNames {
		if s == name {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (valid: %s)", ErrUnknownMode, s, strings.Join(modeNames[:], ", "))
}

// String returns MindSpore's name of the mode.
func (m Mode) String() string {
	if m < modeCount {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// MarshalText returns the mode's name; an out-of-range Mode is an error.
func (m Mode) MarshalText() ([]byte, error) {
	if m >= modeCount {
		return nil, fmt.Errorf("%w %d", ErrUnknownMode, uint8(m))
	}
	return []byte(modeNames[m]), nil
}

// UnmarshalText parses a mode name (see ParseMode), so that a decoded spec
// holds a valid Mode or fails naming the valid ones.
func (m *Mode) UnmarshalText(text []byte) error {
	parsed, err := ParseMode(string(text))
	if err != nil {
		return err
	}
	*m = parsed
	return nil
}

// JSONSchema describes a mode in a stage's `with` schema: one of the
// names, stand_alone (the zero Mode) by default, as in MindSpore.
func (Mode) JSONSchema() map[string]any {
	names := make([]any, len(modeNames))
	for i, n := range modeNames {
		names[i] = n
	}
	return map[string]any{"type": "string", "enum": names, "default": StandAlone.String()}
}

// OneDevice reports whether the mode runs on exactly one device.
func (m Mode) OneDevice() bool { return m == StandAlone }

// Collective reports whether the ranks of the mode talk to each other
// (gradient all-reduce, redistribution): every mode but stand_alone.
func (m Mode) Collective() bool { return m != StandAlone }

// ShardsData reports whether each rank reads its own shard of the
// dataset (num_shards = the device count) rather than the whole of it.
func (m Mode) ShardsData() bool { return m != StandAlone }

// SplitsOperators reports whether operators (and so parameters) are split
// across devices by shard strategies.
func (m Mode) SplitsOperators() bool { return m == SemiAutoParallel || m == AutoParallel }

// Sharded reports whether the mode trains a network whose operators (and
// parameters) are split across ranks: by strategies (semi_auto_parallel,
// auto_parallel) or by the model itself (hybrid_parallel).
func (m Mode) Sharded() bool { return m.SplitsOperators() || m == HybridParallel }

// CheckStrategy is the one rule of which modes run shard strategies, and
// whose: semi_auto_parallel runs the user's, auto_parallel the ones its
// search found (searched), hybrid_parallel splits as the model declares,
// and stand_alone and data_parallel split no operator. It returns why m
// takes no strategy of that origin, nil when it takes one.
func (m Mode) CheckStrategy(searched bool) error {
	if m == SemiAutoParallel || m == AutoParallel && searched {
		return nil
	}
	why := "it does not split operators"
	switch m {
	case AutoParallel:
		why = "it searches every operator's strategy itself (see mspipe plan)"
	case HybridParallel:
		why = "the model declares its own split"
	}
	return fmt.Errorf("shard strategies are for %s; mode %s takes none: %s", SemiAutoParallel, m, why)
}
