package diag

import (
	"strings"
	"testing"
)

func TestSuggest(t *testing.T) {
	long := strings.Repeat("a", 65)
	for _, tc := range []struct {
		name       string
		candidates []string
		want       string
	}{
		{"stgaes", []string{"version", "stages", "params"}, ` (did you mean "stages"?)`},
		{"Version", []string{"version", "status"}, ` (did you mean "version"?)`},
		{"NPU/Trian", []string{"npu/eval", "npu/train"}, ` (did you mean "npu/train"?)`},
		{"integer", []string{"string", "int", "float"}, ` (did you mean "int"?)`}, // 4 edits, under 7/2+2
		{"q", []string{"a", "bb"}, ` (did you mean "a"?)`},
		{"abc", []string{"xyz"}, ""},                                          // 3 edits, not under 3/2+2
		{"rank_size", []string{"version", "server_count", "status"}, ""},      // 7 edits, not under 9/2+2
		{"devce", []string{"device", "devices"}, ` (did you mean "device"?)`}, // the closer wins
		{"ab", []string{"ax", "xb"}, ` (did you mean "ax"?)`},                 // a tie: the first
		{"größe", []string{"grösse", "grosse"}, ` (did you mean "grösse"?)`},  // runes, not bytes
		{"x", nil, ""},
		{long, []string{long}, ""},
		{"aaaa", []string{long}, ""},
	} {
		if got := Suggest(tc.name, tc.candidates); got != tc.want {
			t.Errorf("Suggest(%.20q, %.40q) = %q, want %q", tc.name, tc.candidates, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"größe", "grösse", 2}, {"same", "same", 0},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}
