package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestElementwiseKernels checks every element-wise kernel, through the Go
// loop alone and through the assembly (when this CPU has it) with the Go
// tail, against float64 definitions, at lengths around the vector steps.
func TestElementwiseKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	paths := []bool{false}
	if useElemAsm() {
		paths = append(paths, true)
	}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 1031} {
		x, dy, m, res := randSlice(r, n), randSlice(r, n), randSlice(r, n), randSlice(r, n)
		if n > 2 {
			m[0], m[1] = 0, float32(math.Copysign(0, -1)) // exactly zero never passes the mask
		}
		for _, asm := range paths {
			t.Run(fmt.Sprintf("n%d/asm%t", n, asm), func(t *testing.T) {
				near := func(what string, i int, got float32, want float64) {
					t.Helper()
					if math.Abs(float64(got)-want) > 1e-6*(1+math.Abs(want)) {
						t.Fatalf("%s[%d] = %g, want %g", what, i, got, want)
					}
				}
				nearSum := func(what string, got, want, scale float64) {
					t.Helper()
					if math.Abs(got-want) > 1e-12*(1+scale) {
						t.Fatalf("%s = %.17g, want %.17g", what, got, want)
					}
				}
				var ws, wq, abs float64
				for _, v := range x {
					ws += float64(v)
					wq += float64(v) * float64(v)
					abs += math.Abs(float64(v))
				}
				s, q := sumSquares(asm, x)
				nearSum("sum", s, ws, abs)
				nearSum("sum of squares", q, wq, wq)

				y := make([]float32, n)
				for _, relu := range []bool{false, true} {
					for _, add := range [][]float32{nil, res} {
						affine(asm, y, x, add, 1.5, -0.25, relu)
						for i := range y {
							want := float64(x[i])*1.5 - 0.25
							if add != nil {
								want += float64(add[i])
							}
							if relu {
								want = math.Max(want, 0)
							}
							near("affine", i, y[i], want)
						}
					}
				}

				var wd, wdx, wmd, wmdx, sabs float64
				for i := range dy {
					wd += float64(dy[i])
					wdx += float64(dy[i]) * float64(x[i])
					sabs += math.Abs(float64(dy[i])) * (1 + math.Abs(float64(x[i])))
					if m[i] > 0 {
						wmd += float64(dy[i])
						wmdx += float64(dy[i]) * float64(x[i])
					}
				}
				d, dx := gradSums(asm, nil, dy, x, nil)
				nearSum("Σdy", d, wd, sabs)
				nearSum("Σdy·x", dx, wdx, sabs)
				out := make([]float32, n)
				d, dx = gradSums(asm, out, dy, x, m)
				nearSum("masked Σdy", d, wmd, sabs)
				nearSum("masked Σdy·x", dx, wmdx, sabs)
				for i := range out {
					want := float32(0)
					if m[i] > 0 {
						want = dy[i]
					}
					if out[i] != want {
						t.Fatalf("masked dy[%d] = %g, want %g", i, out[i], want)
					}
				}
				g := make([]float32, n)
				reluGrad(asm, g, dy, m)
				for i := range g {
					if g[i] != out[i] {
						t.Fatalf("relu grad[%d] = %g, want %g", i, g[i], out[i])
					}
				}

				linearComb(asm, y, dy, x, 0.5, -2, 0.125, 0.75)
				for i := range y {
					near("linear combination", i, y[i], 0.5*float64(dy[i])-2*(float64(x[i])-0.75)+0.125)
				}
				addTo(asm, y, x, dy)
				for i := range y {
					if y[i] != x[i]+dy[i] {
						t.Fatalf("sum[%d] = %g, want %g", i, y[i], x[i]+dy[i])
					}
				}
				// In place: out may alias an input.
				copy(y, dy)
				linearComb(asm, y, y, x, 0.5, -2, 0.125, 0.75)
				for i := range y {
					near("in-place linear combination", i, y[i], 0.5*float64(dy[i])-2*(float64(x[i])-0.75)+0.125)
				}
			})
		}
	}
}
