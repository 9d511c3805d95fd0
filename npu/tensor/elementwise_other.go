//go:build !amd64 || purego

package tensor

// useElemAsm reports false: this build has no element-wise assembly.
func useElemAsm() bool { return false }

// Without assembly, the entry points of the vector loops are the Go loops
// themselves (useElemAsm keeps the kernels from calling them).

func sumSqAsm(x []float32) (sum, sumSq float64) { return sumSquares(false, x) }

func affineAsm(y, x, r []float32, s, t float32, relu bool) { affine(false, y, x, r, s, t, relu) }

func gradSumsAsm(dy, x []float32) (sumD, sumDX float64) { return gradSums(false, nil, dy, x, nil) }

func maskedGradSumsAsm(out, dy, x, m []float32) (float64, float64) {
	return gradSums(false, out, dy, x, m)
}

func linCombAsm(dx, dy, x []float32, a, b, c, xm float32) { linearComb(false, dx, dy, x, a, b, c, xm) }

func reluGradAsm(out, dy, y []float32) { reluGrad(false, out, dy, y) }

func addAsm(out, a, b []float32) { addTo(false, out, a, b) }

// The row copies have no fast path here: their callers run the Go loops.

func padRowsAsm(dst, src []float32, rows, w int) bool         { return false }
func unpackRowsAsm(dst, src, add []float32, rows, w int) bool { return false }

func splitRowsAsm(even, odd, src []float32, rows, w int) bool      { return false }
func mergeRowsAsm(dst, even, odd, add []float32, rows, w int) bool { return false }
