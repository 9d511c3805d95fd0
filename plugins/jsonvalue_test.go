package plugins

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestEncodeJSONKeepsFloats(t *testing.T) {
	type point struct {
		X int `json:"x"`
	}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"int", 2, `2`},
		{"integral float", 2.0, `2.0`},
		{"float", 2.5, `2.5`},
		{"float32", float32(0.5), `0.5`},
		{"big float", 1e21, `1e+21`},
		{"negative zero", math.Copysign(0, -1), `-0.0`},
		{"map", map[string]any{"a": 1.0, "b": int64(1), "c": []float64{3, 0.25}}, `{"a":1.0,"b":1,"c":[3.0,0.25]}`},
		{"int keys", map[int]float64{7: 1}, `{"7":1.0}`},
		{"nil map", map[string]any(nil), `null`},
		{"bytes", []byte("hi"), `"aGk="`},
		{"struct", point{X: 3}, `{"x":3}`},
		{"pointer", func() *float64 { f := 4.0; return &f }(), `4.0`},
		{"json.Number", json.Number("12"), `12`},
		{"raw", json.RawMessage(`{"k":1}`), `{"k":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeJSON(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("EncodeJSON(%#v) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestEncodeJSONErrors(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"NaN", map[string]any{"loss": math.NaN()}, "loss: cannot encode NaN"},
		{"Inf", []any{1, math.Inf(1)}, "[1]: cannot encode +Inf"},
		{"func", map[string]any{"f": func() {}}, "cannot encode a func()"},
		{"complex", complex(1, 2), "cannot encode a complex128"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EncodeJSON(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	if _, err := EncodeJSON(cyclic); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("cyclic value: err = %v", err)
	}
}

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    any
		wantErr string
	}{
		{`2`, int64(2), ""},
		{`2.0`, 2.0, ""},
		{`-7e2`, -700.0, ""},
		{`{"a":[1,1.5,"x",null,true]}`, map[string]any{"a": []any{int64(1), 1.5, "x", nil, true}}, ""},
		{`9223372036854775807`, int64(math.MaxInt64), ""},
		{`9223372036854775808`, nil, "out of the int64 range"},
		{`1e400`, nil, "out of the float64 range"},
		{``, nil, "empty JSON document"},
		{`{"a":1} x`, nil, "unexpected data after the JSON value"},
		{`{"a":}`, nil, "invalid character"},
		{strings.Repeat("[", 600) + strings.Repeat("]", 600), nil, "nested deeper"},
	}
	for _, tt := range tests {
		got, err := DecodeJSON([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("DecodeJSON(%.20q) err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeJSON(%q) = %#v, %v, want %#v", tt.in, got, err, tt.want)
		}
	}
}

func TestDecodeJSONObject(t *testing.T) {
	for _, in := range []string{"", " ", "null", "{}"} {
		m, err := DecodeJSONObject([]byte(in))
		if err != nil || m == nil || len(m) != 0 {
			t.Errorf("DecodeJSONObject(%q) = %v, %v, want an empty map", in, m, err)
		}
	}
	if _, err := DecodeJSONObject([]byte(`[1]`)); err == nil || !strings.Contains(err.Error(), "want a JSON object, got array") {
		t.Errorf("array: err = %v", err)
	}
}

// FuzzDecodeJSON checks that decoding never panics and that whatever
// decodes survives an encode/decode round trip unchanged, ints and floats
// included.
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{`{"a":1,"b":1.0,"c":[true,null,"x"]}`, `2.0`, `-0`, `1e5`, `"\u00e9"`, `[[[]]]`, `{"":{}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := DecodeJSON(data)
		if err != nil {
			return
		}
		enc, err := EncodeJSON(v)
		if err != nil {
			t.Fatalf("EncodeJSON of decoded %q: %v", data, err)
		}
		again, err := DecodeJSON(enc)
		if err != nil {
			t.Fatalf("DecodeJSON(%s): %v", enc, err)
		}
		if !reflect.DeepEqual(v, again) {
			t.Fatalf("round trip of %q: %#v became %#v", data, v, again)
		}
	})
}
