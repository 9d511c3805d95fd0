package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRowKernelsAsmMatchesGo runs the assembly row copies of Conv3x3's
// layout (when this CPU has them) and their Go loops on the same inputs,
// destinations prefilled with the same garbage, and requires the same bits
// everywhere, untouched floats included.
func TestRowKernelsAsmMatchesGo(t *testing.T) {
	if !useElemAsm() {
		t.Skip("no element-wise assembly on this CPU or build")
	}
	r := rand.New(rand.NewPCG(9, 10))
	garbage := func(n int) []float32 {
		s := randSlice(r, n)
		for i := 0; i < n; i += 7 {
			s[i] = float32(math.NaN())
		}
		return s
	}
	same := func(t *testing.T, what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d] = %g, Go loop gives %g", what, i, got[i], want[i])
			}
		}
	}
	for _, rows := range []int{1, 3} {
		for _, w := range []int{8, 16, 40} {
			t.Run(fmt.Sprintf("rows%d/w%d", rows, w), func(t *testing.T) {
				// Stride-1 layout: rows of w+1 floats, a zero first.
				src, padded := randSlice(r, rows*w), garbage(rows*(w+1)+3)
				want := slices.Clone(padded)
				if !padRowsAsm(padded, src, rows, w) {
					t.Fatal("padRowsAsm has no fast path")
				}
				padRowsGo(want, src, rows, w)
				same(t, "padRows", padded, want)

				for _, add := range [][]float32{nil, randSlice(r, rows*w)} {
					dst := garbage(rows*w + 3)
					want := slices.Clone(dst)
					if !unpackRowsAsm(dst, padded, add, rows, w) {
						t.Fatal("unpackRowsAsm has no fast path")
					}
					unpackRowsGo(want, padded, add, rows, w)
					same(t, fmt.Sprintf("unpackRows(add %t)", add != nil), dst, want)
				}

				// Stride-2 phases: source rows of 2w floats, 4w apart.
				img := randSlice(r, (rows-1)*4*w+2*w+5)
				even, odd := garbage(rows*(w+1)+2), garbage(rows*(w+1)+2)
				wantEven, wantOdd := slices.Clone(even), slices.Clone(odd)
				if !splitRowsAsm(even, odd, img, rows, w) {
					t.Fatal("splitRowsAsm has no fast path")
				}
				splitRowsGo(wantEven, wantOdd, img, rows, w)
				same(t, "splitRows even", even, wantEven)
				same(t, "splitRows odd", odd, wantOdd)

				for _, add := range [][]float32{nil, randSlice(r, len(img))} {
					dst := garbage(len(img))
					want := slices.Clone(dst)
					if !mergeRowsAsm(dst, even, odd, add, rows, w) {
						t.Fatal("mergeRowsAsm has no fast path")
					}
					mergeRowsGo(want, even, odd, add, rows, w)
					same(t, fmt.Sprintf("mergeRows(add %t)", add != nil), dst, want)
				}
			})
		}
	}
}
