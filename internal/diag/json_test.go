package diag

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestJSONSyntaxErrorPlaces checks the offset and message of each kind of
// error: the offending byte itself, also inside strings, numbers and
// literals, where encoding/json's offset is not exact.
func TestJSONSyntaxErrorPlaces(t *testing.T) {
	tests := []struct {
		in  string
		off int
		msg string
	}{
		{`{"a": tru}`, 6, `expected a value, found "tru"`},
		{"{\"a\": \"x\x01\"}", 8, "control character U+0001 in string must be escaped"},
		{`{"a": -}`, 7, "invalid number: expected a digit, found '}'"},
		{`[1.]`, 3, "invalid number: expected a digit, found ']'"},
		{`{"a" "b"}`, 5, `expected ':' after object key, found '"'`},
		{`{"a": 1,}`, 7, "trailing comma before '}' is not allowed in JSON"},
		{`[1,]`, 2, "trailing comma before ']' is not allowed in JSON"},
		{`[1 2]`, 3, `expected ',' or ']' after array element, found '2'`},
		{`{"a": "\q"}`, 7, `invalid escape "\\q" in string`},
		{`{"\u12"}`, 2, `invalid \u escape in string: want four hex digits`},
		{"{\"a\n\": 1}", 1, "unterminated string (newline before the closing quote)"},
		{`"abc`, 0, "unterminated string, found end of file"},
		{`[`, 1, "expected a value, found end of file"},
		{`{} x`, 3, `expected end of file after the top-level value, found "x"`},
		{"[\xff]", 1, "expected a value, found byte 0xff"},
		{``, 0, "expected a value, found end of file"},
	}
	for _, tt := range tests {
		off, msg, found := JSONSyntaxError([]byte(tt.in))
		if !found || off != tt.off || msg != "syntax error: "+tt.msg {
			t.Errorf("JSONSyntaxError(%q) = %d, %q, %v; want %d, %q", tt.in, off, msg, found, tt.off, "syntax error: "+tt.msg)
		}
	}
}

func TestJSONSyntaxErrorAgreesWithEncodingJSON(t *testing.T) {
	inputs := []string{
		`{}`, `[]`, `""`, `0`, `-0.5e+10`, `true`, `null`, `{"a":[1,2,{"b":null}]}`, " \t\r\n{} \n",
		`{"a":"\u00e9\n\"\\\/"}`, `[1.]`, `[.5]`, `[01]`, `[-]`, `[1e]`, `{"a":1,}`, `[1,]`, `{,}`,
		`{"a"}`, `{"a":}`, `{"a" 1}`, `[1 2]`, `"abc`, `"a` + "\t" + `"`, `nul`, `truex`, `{} {}`, `}`, ``, `  `,
		"[\"\xff\"]", `{"a":"b"}}`, `[[[[]]]]`, `[[[[]]]`, `{"\u"}`,
	}
	for _, in := range inputs {
		_, msg, found := JSONSyntaxError([]byte(in))
		if valid := json.Valid([]byte(in)); found == valid {
			t.Errorf("JSONSyntaxError(%q) found=%v (%s), json.Valid=%v", in, found, msg, valid)
		}
	}
}

// FuzzJSONSyntaxError: the scanner finds an error exactly when encoding/json
// rejects the text, at an offset inside it, with a message.
func FuzzJSONSyntaxError(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2.5e-3,"x\u00e9"]}`, `[1,]`, `{"a" 1}`, `"\q"`, "\xff", `tru`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		off, msg, found := JSONSyntaxError(data)
		if found == json.Valid(data) {
			t.Fatalf("found=%v (%s) but json.Valid=%v", found, msg, json.Valid(data))
		}
		if found && (off < 0 || off > len(data) || !strings.HasPrefix(msg, "syntax error: ")) {
			t.Fatalf("error at %d of %d bytes: %q", off, len(data), msg)
		}
	})
}

func TestSkipJSONSpace(t *testing.T) {
	data := []byte(" \t\r\n x \n")
	if got := SkipJSONSpace(data, 0); got != 5 {
		t.Errorf("SkipJSONSpace from 0 = %d, want 5", got)
	}
	if got := SkipJSONSpace(data, 6); got != len(data) {
		t.Errorf("SkipJSONSpace to the end = %d, want %d", got, len(data))
	}
}
