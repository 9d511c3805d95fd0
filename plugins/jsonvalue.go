package plugins

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// maxJSONDepth bounds nesting so that a cyclic value or a hostile document
// fails cleanly instead of exhausting the stack.
const maxJSONDepth = 512

// EncodeJSON encodes v as JSON like encoding/json, except that a float whose
// value is integral keeps a decimal point ("2.0"), so that the receiver can
// tell it from the integer 2. NaN and infinities are errors. Inside structs
// (encoded by encoding/json itself) the distinction is not kept.
func EncodeJSON(v any) ([]byte, error) {
	n, err := normalizeJSON(reflect.ValueOf(v), 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(n)
}

func normalizeJSON(v reflect.Value, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels", maxJSONDepth)
	}
	if !v.IsValid() {
		return nil, nil
	}
	t := v.Type()
	if t == reflect.TypeFor[json.Number]() || t.Implements(reflect.TypeFor[json.Marshaler]()) ||
		t.Implements(reflect.TypeFor[encoding.TextMarshaler]()) {
		return v.Interface(), nil
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return formatFloat(v.Float(), t.Bits())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, nil
		}
		return normalizeJSON(v.Elem(), depth+1)
	case reflect.Map:
		if v.IsNil() {
			return nil, nil
		}
		out := make(map[string]any, v.Len())
		iter := v.MapRange()
		for iter.Next() {
			key, err := mapKeyString(iter.Key())
			if err != nil {
				return nil, err
			}
			val, err := normalizeJSON(iter.Value(), depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			out[key] = val
		}
		return out, nil
	case reflect.Slice:
		if v.IsNil() {
			return nil, nil
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return v.Interface(), nil // []byte: base64 as encoding/json does
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			val, err := normalizeJSON(v.Index(i), depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = val
		}
		return out, nil
	case reflect.Complex64, reflect.Complex128, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return nil, fmt.Errorf("cannot encode a %s as JSON", t)
	}
	return v.Interface(), nil
}

func mapKeyString(k reflect.Value) (string, error) {
	if k.Kind() == reflect.String {
		return k.String(), nil
	}
	if tm, ok := k.Interface().(encoding.TextMarshaler); ok {
		b, err := tm.MarshalText()
		return string(b), err
	}
	switch k.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(k.Uint(), 10), nil
	}
	return "", fmt.Errorf("cannot encode a map key of type %s as JSON", k.Type())
}

func formatFloat(f float64, bits int) (json.Number, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", fmt.Errorf("cannot encode %v as JSON", f)
	}
	s := strconv.FormatFloat(f, 'g', -1, bits)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return json.Number(s), nil
}

// DecodeJSON decodes one JSON value. Objects become map[string]any, arrays
// []any, integers int64 and other numbers float64. An integer outside the
// int64 range, trailing data and nesting deeper than 512 levels are errors.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty JSON document")
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("unexpected data after the JSON value at offset %d", dec.InputOffset())
	}
	return convertNumbers(v, 0)
}

// DecodeJSONObject decodes a JSON object as DecodeJSON does. Empty input and
// null give an empty map.
func DecodeJSONObject(data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]any{}, nil
	}
	v, err := DecodeJSON(data)
	if err != nil {
		return nil, err
	}
	switch m := v.(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		return m, nil
	}
	return nil, fmt.Errorf("want a JSON object, got %s", jsonKind(v))
}

func convertNumbers(v any, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
	}
	switch x := v.(type) {
	case json.Number:
		return parseNumber(string(x))
	case map[string]any:
		for k, e := range x {
			c, err := convertNumbers(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
	case []any:
		for i, e := range x {
			c, err := convertNumbers(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
	}
	return v, nil
}

func parseNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("integer %s out of the int64 range", s)
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("number %s out of the float64 range", s)
	}
	return f, nil
}

// jsonKind names the JSON type of a decoded value, for error messages.
func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string " + strconv.Quote(truncate(x, 40))
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case int64:
		return fmt.Sprintf("integer %d", x)
	case float64:
		return fmt.Sprintf("number %v", x)
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
