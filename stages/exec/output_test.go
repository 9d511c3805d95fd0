package exec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

func TestParseOutputs(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]any
		wantErr string
	}{
		{"empty", "", map[string]any{}, ""},
		{"values", "a=1\nb=1.5\nc=true\nd=hello world\ne=\"quoted\"\nf={\"k\":[1]}\ng=\nh=a=b\r\n\n",
			map[string]any{"a": int64(1), "b": 1.5, "c": true, "d": "hello world", "e": "quoted",
				"f": map[string]any{"k": []any{int64(1)}}, "g": "", "h": "a=b"}, ""},
		{"later wins", "a=1\na=2\n", map[string]any{"a": int64(2)}, ""},
		{"heredoc", "msg<<END\nx=1\n\nEND\nn=3", map[string]any{"msg": "x=1\n", "n": int64(3)}, ""},
		{"heredoc json", "v<<E\n[1,\n2]\nE\n", map[string]any{"v": []any{int64(1), int64(2)}}, ""},
		{"no separator", "a=1\njust text\n", nil, "$MSPIPE_OUTPUT line 2: want name=value or name<<DELIMITER"},
		{"bad name", "a-b=1\n", nil, "line 1: output name \"a-b\""},
		{"empty name", "=1\n", nil, "line 1: want name=value"},
		{"reserved", "stdout=x\n", nil, `line 1: "stdout" is set by the exec stage itself`},
		{"open heredoc", "a=1\nmsg<<END\nx\n", nil, `line 2: "msg": no line "END" ends the value`},
		{"no delimiter", "msg<<\n", nil, "line 1: \"msg\" has no delimiter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseOutputs([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseOutputs = %#v, %v, want %#v", got, err, tt.want)
			}
		})
	}
}

// FuzzParseOutputs checks that any file content gives either outputs with
// valid names or an error naming a line, never a panic.
func FuzzParseOutputs(f *testing.F) {
	for _, seed := range []string{"a=1\n", "m<<E\nx\nE\n", "x\n", "a=[1,2\n", "n<<\n", "=\n", "é=1"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := parseOutputs(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "$MSPIPE_OUTPUT line ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		for name, v := range out {
			if plugins.ValidateOutputName(name) != nil || name == "stdout" || name == "exit_code" {
				t.Fatalf("bad name %q accepted", name)
			}
			if _, err := plugins.EncodeJSON(v); err != nil {
				t.Fatalf("value of %q does not encode: %v", name, err)
			}
		}
	})
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, s := range []string{"abc", "defgh", "ijklmnopqrst", "é"} {
		b.write(s)
	}
	if got := b.String(); got != "opqrsté" {
		t.Errorf("tail = %q", got)
	}
}

func TestCommandJSON(t *testing.T) {
	var c Command
	if err := c.UnmarshalJSON([]byte(`["a","b"]`)); err != nil || !reflect.DeepEqual(c.Argv, []string{"a", "b"}) || c.Line != "" {
		t.Errorf("list: %+v, %v", c, err)
	}
	if err := c.UnmarshalJSON([]byte(`"make all"`)); err != nil || c.Line != "make all" || c.Argv != nil {
		t.Errorf("string: %+v, %v", c, err)
	}
	if err := c.UnmarshalJSON([]byte(`5`)); err == nil {
		t.Error("number accepted")
	}
	for _, c := range []Command{{Line: "x y"}, {Argv: []string{"x", "y"}}} {
		data, err := c.MarshalJSON()
		var back Command
		if err != nil || back.UnmarshalJSON(data) != nil || !reflect.DeepEqual(back, c) {
			t.Errorf("round trip of %+v: %s, %+v", c, data, back)
		}
	}
}
