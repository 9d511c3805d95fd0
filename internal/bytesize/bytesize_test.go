package bytesize

import (
	"math"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"1": 1, "512MiB": 512 << 20, "2 GiB": 2 << 30, "3KB": 3000, "1TiB": 1 << 40, "64MiB": 64 << 20, "7B": 7, "5 MB": 5e6, "1 KB": 1000, "3TB": 3e12, "100": 100,
		"1.5GiB": 3 << 29, "1.5 MiB": 1536 << 10, "0.5KB": 500, "2.0 GiB": 2 << 30,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1MiB", "1.5B", "1.5", "0.0001KiB", ".5GiB", "5.GiB", "1e3", "1/2GiB", "1.2.3MiB", "12 parsecs", "99999999999TiB", "5XB", "lots", "MiB", "1 mib"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", bad, got)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {128 << 10, "128.0 KiB"}, {1536 << 10, "1.5 MiB"},
		{3 << 20, "3.0 MiB"}, {1<<30 - 1, "1024.0 MiB"}, {1 << 30, "1 GiB"}, {5 << 30, "5 GiB"}, {3 << 29, "1.5 GiB"},
		{2 << 40, "2 TiB"}, {1 << 50, "1 PiB"}, {3 << 60, "3072 PiB"}, {math.MaxInt64, "8192.0 PiB"},
	} {
		if got := Format(tc.n); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestRoundTrip: what Format writes as a whole number, Parse reads back.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int64{1, 1023, 1 << 30, 7 << 30, 3 << 40} {
		s := Format(n)
		if got, err := Parse(s); err != nil || got != n {
			t.Errorf("Parse(Format(%d) = %q) = %d, %v", n, s, got, err)
		}
	}
}
