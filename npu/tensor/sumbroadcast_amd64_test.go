//go:build amd64 && !purego

package tensor

import (
	"testing"
	"unsafe"
)

// The kernel stores with plain stores only when every destination is one
// of the sources (AllReduce in place); a destination elsewhere, even
// beside sources, gets non-temporal stores.
func TestSumBroadcastStoreKind(t *testing.T) {
	a, b, c := make([]float32, 8), make([]float32, 8), make([]float32, 8)
	p := func(s ...[]float32) []unsafe.Pointer {
		out := make([]unsafe.Pointer, len(s))
		for i, x := range s {
			out[i] = unsafe.Pointer(&x[0])
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		dsts, srcs []unsafe.Pointer
		plain      bool
	}{
		{"in place", p(a, b), p(a, b), true},
		{"in place, other order", p(b, a), p(a, b), true},
		{"one source of several", p(b), p(a, b, c), true},
		{"apart", p(c), p(a, b), false},
		{"one apart", p(a, c), p(a, b), false},
	} {
		if got := allIn(tc.dsts, tc.srcs); got != tc.plain {
			t.Errorf("%s: plain stores %t, want %t", tc.name, got, tc.plain)
		}
	}
}
