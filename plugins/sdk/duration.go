package sdk

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Duration is a `with` field holding a duration, written as a Go duration
// string ("90s", "1h30m") or a number of seconds.
type Duration time.Duration

// JSONSchema describes the accepted forms.
func (Duration) JSONSchema() map[string]any {
	return map[string]any{
		"description": `a duration such as "90s" or "1h30m", or a number of seconds`,
		"anyOf": []any{
			map[string]any{"type": "string", "pattern": `^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`},
			map[string]any{"type": "number", "minimum": int64(0)},
		},
	}
}

// UnmarshalJSON accepts a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		if v < 0 {
			return fmt.Errorf("duration %q is negative", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(data, &secs); err != nil {
		return fmt.Errorf("duration: want a string such as \"90s\" or a number of seconds, got %s", data)
	}
	if secs < 0 || secs >= math.MaxInt64/float64(time.Second) {
		return fmt.Errorf("duration: %v seconds out of range", secs)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d Duration) String() string { return time.Duration(d).String() }
