package plugins

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// MaxMessageBytes bounds one gRPC message the host receives from a
// plugin: outputs and events are far smaller, and go-plugin's own default
// (2 GiB) would let a plugin make the host allocate that much.
const MaxMessageBytes = 16 << 20

// Limits on what one run of a stage may output. Outputs are kept in the
// run's run.json, which resume, logs and report read whole (and which a
// dependent's resolved inputs repeat): bulk data belongs in a file whose
// path is the output.
const (
	MaxOutputs      = 256
	MaxOutputsBytes = 1 << 20 // the outputs' JSON, all together
)

// CheckOutputSize refuses outputs that would make run.json large: more
// than MaxOutputs of them, or more than MaxOutputsBytes of JSON together.
// The error names the largest outputs and wraps [ErrBadOutput].
func CheckOutputSize(outputs map[string]any) error {
	if len(outputs) > MaxOutputs {
		return fmt.Errorf("%w: %d outputs, a stage may have at most %d", ErrBadOutput, len(outputs), MaxOutputs)
	}
	type sized struct {
		name string
		size int
	}
	var all []sized
	total := 0
	for name, v := range outputs {
		n := len(name) + 4 + jsonSize(v, MaxOutputsBytes+1)
		all = append(all, sized{name, n})
		total += n
	}
	if total <= MaxOutputsBytes {
		return nil
	}
	slices.SortFunc(all, func(a, b sized) int { return b.size - a.size })
	big := all[0]
	what := fmt.Sprintf("output %q is %s of JSON", truncate(big.name, 40), formatBytes(big.size))
	if big.size > MaxOutputsBytes {
		what = fmt.Sprintf("output %q (%s) is more than %s of JSON", truncate(big.name, 40), valueKind(outputs[big.name]), formatBytes(MaxOutputsBytes))
	} else if len(all) > 1 {
		what = fmt.Sprintf("the outputs take %s of JSON together (the largest, %q, %s)", formatBytes(total), truncate(big.name, 40), formatBytes(big.size))
	}
	return fmt.Errorf("%w: %s; a stage's outputs may take at most %s of run.json: write large values to a file and output its path",
		ErrBadOutput, what, formatBytes(MaxOutputsBytes))
}

// jsonSize is the length of v's JSON encoding (as encoding/json writes
// it), counting no further than limit.
func jsonSize(v any, limit int) int {
	switch x := v.(type) {
	case nil:
		return 4
	case string:
		return stringJSONSize(x, limit)
	case bool:
		return 5
	case []any:
		n := 2
		for _, e := range x {
			if n > limit {
				break
			}
			n += jsonSize(e, limit-n) + 1
		}
		return n
	case map[string]any:
		n := 2
		for k, e := range x {
			if n > limit {
				break
			}
			n += stringJSONSize(k, limit-n) + 2
			n += jsonSize(e, limit-n)
		}
		return n
	}
	return 24 // a number
}

// stringJSONSize counts the escapes encoding/json writes: two bytes for a
// quote, backslash or common control character, six for other control
// characters, for <, > and &, and for invalid UTF-8.
func stringJSONSize(s string, limit int) int {
	n := 2
	for i := 0; i < len(s) && n <= limit; {
		c := s[i]
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				n += 6
			} else {
				n += size
			}
			i += size
			continue
		default:
			n++
		}
		i++
	}
	return n
}

// valueKind names a decoded JSON value's kind with its article.
func valueKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "a value"
}

func formatBytes(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
