package diag

import (
	"math/rand/v2"
	"testing"
)

func TestLocatorPosition(t *testing.T) {
	data := []byte("ab\n\ncd\r\nÿz")
	tests := []struct{ off, line, col int }{
		{0, 1, 1}, {1, 1, 2}, {2, 1, 3}, // the newline belongs to its line
		{3, 2, 1},                       // an empty line
		{4, 3, 1}, {6, 3, 3}, {7, 3, 4}, // \r is a byte of the line
		{8, 4, 1}, {10, 4, 3}, // ÿ is two bytes: columns count bytes
		{11, 4, 4}, // just past the end: where "end of file" is reported
		{99, 4, 4}, // clamped to the end
		{-5, 1, 1}, // clamped to the start
	}
	loc := NewLocator(data)
	for _, tt := range tests {
		if line, col := loc.Position(tt.off); line != tt.line || col != tt.col {
			t.Errorf("Position(%d) = %d:%d, want %d:%d", tt.off, line, col, tt.line, tt.col)
		}
	}
	if line, col := NewLocator(nil).Position(0); line != 1 || col != 1 {
		t.Errorf("empty text: %d:%d, want 1:1", line, col)
	}
}

// TestLocatorAgreesWithCounting compares the index with the definition:
// line = 1 + newlines before off, column = bytes since the last newline + 1.
func TestLocatorAgreesWithCounting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		data := make([]byte, rng.IntN(200))
		for i := range data {
			data[i] = "ab\n"[rng.IntN(3)]
		}
		loc := NewLocator(data)
		line, col := 1, 1
		for off := 0; off <= len(data); off++ {
			if gl, gc := loc.Position(off); gl != line || gc != col {
				t.Fatalf("%q: Position(%d) = %d:%d, want %d:%d", data, off, gl, gc, line, col)
			}
			if off < len(data) && data[off] == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
		}
	}
}
