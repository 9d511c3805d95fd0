package parallel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mspipe/mspipe/internal/diag"
)

// The JSON form is MindSpore's (see [FormatJSON]). It is read token by
// token so that a key given twice, which encoding/json would silently
// resolve to its last value, is an error naming the item.

func decodeStrategyJSON(data []byte) (*StrategyFile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	f := &StrategyFile{Operators: map[string][][]int{}, Layouts: map[string]TensorLayout{}}
	stages := map[string]int{}
	seen, err := decodeObject(dec, "the file", func(key string) error {
		switch key {
		case "current_stage":
			return decodeValue(dec, "current_stage", &f.CurrentStage)
		case "parallel_strategy_item":
			_, err := decodeObject(dec, key, func(op string) error {
				if op == "" {
					return fmt.Errorf("%w: an operator without a name", ErrStrategyFile)
				}
				shards, stage, err := decodeOperatorJSON(dec, op)
				f.Operators[op] = shards
				stages[op] = stage
				return err
			})
			return err
		case "parallel_layout_item":
			_, err := decodeObject(dec, key, func(name string) error {
				if name == "" {
					return fmt.Errorf("%w: a layout without a parameter name", ErrStrategyFile)
				}
				l, err := decodeLayoutJSON(dec, name)
				f.Layouts[name] = l
				return err
			})
			return err
		}
		return fmt.Errorf("%w: unknown key %q", ErrStrategyFile, key)
	})
	if err != nil {
		return nil, err
	}
	if !seen["current_stage"] {
		return nil, fmt.Errorf("%w: current_stage missing", ErrStrategyFile)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrStrategyFile)
	}
	f.setOperatorStages(stages)
	return f, nil
}

func decodeOperatorJSON(dec *json.Decoder, op string) ([][]int, int, error) {
	var shards [][]int
	var stage int
	seen, err := decodeObject(dec, "operator "+op, func(key string) error {
		switch key {
		case "stage":
			return decodeValue(dec, "operator "+op+" stage", &stage)
		case "parallel_strategy":
			return decodeValue(dec, "operator "+op+" parallel_strategy", &shards)
		}
		return fmt.Errorf("%w: operator %s: unknown key %q", ErrStrategyFile, op, key)
	})
	if err != nil {
		return nil, 0, err
	}
	for _, key := range []string{"stage", "parallel_strategy"} {
		if !seen[key] {
			return nil, 0, fmt.Errorf("%w: operator %s: %s missing", ErrStrategyFile, op, key)
		}
	}
	if shards == nil {
		shards = [][]int{}
	}
	return shards, stage, nil
}

func decodeLayoutJSON(dec *json.Decoder, name string) (TensorLayout, error) {
	var l TensorLayout
	fields := map[string]any{
		"dev_matrix":            &l.DeviceMatrix,
		"tensor_map":            &l.TensorMap,
		"tensor_shape":          &l.Shape,
		"field":                 &l.Field,
		"opt_weight_shard_step": &l.OptWeightShardStep,
		"opt_weight_shard_size": &l.OptWeightShardSize,
		"param_split_shape":     &l.ParamSplitShape,
		"indices_offset":        &l.IndicesOffset,
	}
	where := "parameter " + name
	seen, err := decodeObject(dec, where, func(key string) error {
		dst, ok := fields[key]
		if !ok {
			return fmt.Errorf("%w: %s: unknown key %q", ErrStrategyFile, where, key)
		}
		return decodeValue(dec, where+" "+key, dst)
	})
	if err != nil {
		return TensorLayout{}, err
	}
	// The keys MindSpore's own JSON reader requires, except tensor_shape,
	// which the protobuf form has no place for.
	for _, key := range []string{"dev_matrix", "tensor_map", "field", "opt_weight_shard_step", "opt_weight_shard_size"} {
		if !seen[key] {
			return TensorLayout{}, fmt.Errorf("%w: %s: %s missing", ErrStrategyFile, where, key)
		}
	}
	if seen["param_split_shape"] != seen["indices_offset"] {
		return TensorLayout{}, fmt.Errorf("%w: %s: param_split_shape and indices_offset come together", ErrStrategyFile, where)
	}
	// Empty lists read as nil, as the protobuf form reads them.
	for _, list := range []*[]int{&l.TensorMap, &l.ParamSplitShape, &l.IndicesOffset} {
		if len(*list) == 0 {
			*list = nil
		}
	}
	return l, nil
}

// decodeObject reads one JSON object, calling field for each key, which
// must consume the key's value. A key given twice is an error; the keys
// seen are returned. Errors carry the offset of the key (or of the object,
// for what is wrong with it as a whole) unless they carry a closer one.
func decodeObject(dec *json.Decoder, what string, field func(key string) error) (map[string]bool, error) {
	start := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		return nil, at(start, jsonError(what, err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, at(start, fmt.Errorf("%w: %s: want an object, found %v", ErrStrategyFile, what, tok))
	}
	seen := map[string]bool{}
	for dec.More() {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, at(off, jsonError(what, err))
		}
		key, ok := tok.(string)
		if !ok {
			return nil, at(off, fmt.Errorf("%w: %s: want a key, found %v", ErrStrategyFile, what, tok))
		}
		if seen[key] {
			return nil, at(off, fmt.Errorf("%w: %s: key %q given twice", ErrStrategyFile, what, key))
		}
		seen[key] = true
		if err := field(key); err != nil {
			return nil, at(off, err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, at(dec.InputOffset(), jsonError(what, err))
	}
	return seen, nil
}

// decodeValue reads one value into dst, refusing null.
func decodeValue(dec *json.Decoder, what string, dst any) error {
	off := dec.InputOffset()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return at(off, jsonError(what, err))
	}
	if string(raw) == "null" {
		return at(off, fmt.Errorf("%w: %s is null", ErrStrategyFile, what))
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return at(off, fmt.Errorf("%w: %s: %s does not fit %s", ErrStrategyFile, what, typeErr.Value, typeErr.Type))
		}
		return at(off, fmt.Errorf("%w: %s: %v", ErrStrategyFile, what, err))
	}
	return nil
}

// offsetError is an error at a byte offset of a JSON strategy file; the
// offset may point at the separators before the place.
type offsetError struct {
	off int64
	err error
}

func (e *offsetError) Error() string { return e.err.Error() }
func (e *offsetError) Unwrap() error { return e.err }

// at gives err the offset off unless it has one already.
func at(off int64, err error) error {
	var oe *offsetError
	if errors.As(err, &oe) {
		return err
	}
	return &offsetError{off: off, err: err}
}

// jsonPosition returns "line:col" of err's offset in data, skipping the
// separators it may point at, or "" when err has no offset.
func jsonPosition(data []byte, err error) string {
	var oe *offsetError
	if !errors.As(err, &oe) {
		return ""
	}
	off := int(min(max(oe.off, 0), int64(len(data))))
	for off < len(data) && strings.IndexByte(" \t\r\n:,", data[off]) >= 0 {
		off++
	}
	line, col := diag.NewLocator(data).Position(off)
	return fmt.Sprintf("%d:%d", line, col)
}

// jsonError describes a syntax error met while reading what.
func jsonError(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s: the JSON ends early", ErrStrategyFile, what)
	}
	return fmt.Errorf("%w: %s: %v", ErrStrategyFile, what, err)
}

// encodeStrategyJSON writes f (already validated) with one line per
// operator and per layout, items in name order.
func encodeStrategyJSON(f *StrategyFile) []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"current_stage\": ")
	b.WriteString(strconv.Itoa(f.CurrentStage))
	b.WriteString(",\n  \"parallel_strategy_item\": {")
	for i, op := range slices.Sorted(maps.Keys(f.Operators)) {
		item := struct {
			Stage    int     `json:"stage"`
			Strategy [][]int `json:"parallel_strategy"`
		}{f.OperatorStage(op), f.Operators[op]}
		if item.Strategy == nil {
			item.Strategy = [][]int{}
		}
		writeJSONItem(&b, i, op, item)
	}
	b.WriteString("\n  },\n  \"parallel_layout_item\": {")
	for i, name := range slices.Sorted(maps.Keys(f.Layouts)) {
		l := f.Layouts[name]
		item := struct {
			DevMatrix          []int  `json:"dev_matrix"`
			TensorMap          []int  `json:"tensor_map"`
			TensorShape        *[]int `json:"tensor_shape,omitempty"` // a pointer: a scalar's [] is written, an unknown shape is not
			Field              int    `json:"field"`
			OptWeightShardStep int    `json:"opt_weight_shard_step"`
			OptWeightShardSize int    `json:"opt_weight_shard_size"`
			ParamSplitShape    []int  `json:"param_split_shape,omitempty"`
			IndicesOffset      []int  `json:"indices_offset,omitempty"`
		}{l.DeviceMatrix, l.TensorMap, nil, l.Field, l.OptWeightShardStep, l.OptWeightShardSize, l.ParamSplitShape, l.IndicesOffset}
		if item.TensorMap == nil {
			item.TensorMap = []int{}
		}
		if l.Shape != nil {
			item.TensorShape = &l.Shape
		}
		writeJSONItem(&b, i, name, item)
	}
	b.WriteString("\n  }\n}\n")
	return b.Bytes()
}

func writeJSONItem(b *bytes.Buffer, i int, key string, value any) {
	if i > 0 {
		b.WriteByte(',')
	}
	k, _ := json.Marshal(key)   // a string always marshals
	v, _ := json.Marshal(value) // ints and slices of ints always marshal
	b.WriteString("\n    ")
	b.Write(k)
	b.WriteString(": ")
	b.Write(v)
}
