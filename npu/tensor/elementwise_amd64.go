//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// useElemAsm reports whether the AVX2 element-wise loops can run.
func useElemAsm() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// The assembly loops take lengths that are whole multiples of their vector
// step (16 floats for the sums, 8 otherwise); the Go wrappers below check
// that the slices cover them.

//go:noescape
func sumSqAVX2(x *float32, n int) (sum, sumSq float64)

//go:noescape
func affineAVX2(y, x *float32, n int, s, t, lo float32)

//go:noescape
func affineAddAVX2(y, x, r *float32, n int, s, t, lo float32)

//go:noescape
func gradSumsAVX2(dy, x *float32, n int) (sumD, sumDX float64)

//go:noescape
func maskedGradSumsAVX2(out, dy, x, m *float32, n int) (sumD, sumDX float64)

//go:noescape
func linCombAVX2(dx, dy, x *float32, n int, a, b, c, xm float32)

//go:noescape
func reluGradAVX2(out, dy, y *float32, n int)

//go:noescape
func addAVX2(out, a, b *float32, n int)

func sumSqAsm(x []float32) (sum, sumSq float64) { return sumSqAVX2(&x[0], len(x)) }

func affineAsm(y, x, r []float32, s, t float32, relu bool) {
	n := len(y)
	_ = x[n-1]
	lo := float32(negInf32())
	if relu {
		lo = 0
	}
	if r != nil {
		_ = r[n-1]
		affineAddAVX2(&y[0], &x[0], &r[0], n, s, t, lo)
		return
	}
	affineAVX2(&y[0], &x[0], n, s, t, lo)
}

func gradSumsAsm(dy, x []float32) (sumD, sumDX float64) {
	_ = x[len(dy)-1]
	return gradSumsAVX2(&dy[0], &x[0], len(dy))
}

func maskedGradSumsAsm(out, dy, x, m []float32) (sumD, sumDX float64) {
	n := len(dy)
	_, _, _ = out[n-1], x[n-1], m[n-1]
	return maskedGradSumsAVX2(&out[0], &dy[0], &x[0], &m[0], n)
}

func linCombAsm(dx, dy, x []float32, a, b, c, xm float32) {
	n := len(dx)
	_, _ = dy[n-1], x[n-1]
	linCombAVX2(&dx[0], &dy[0], &x[0], n, a, b, c, xm)
}

func reluGradAsm(out, dy, y []float32) {
	n := len(out)
	_, _ = dy[n-1], y[n-1]
	reluGradAVX2(&out[0], &dy[0], &y[0], n)
}

func addAsm(out, a, b []float32) {
	n := len(out)
	_, _ = a[n-1], b[n-1]
	addAVX2(&out[0], &a[0], &b[0], n)
}

//go:noescape
func padRowsAVX2(dst, src *float32, rows, w int)

//go:noescape
func unpackRowsAVX2(dst, src *float32, rows, w int)

//go:noescape
func unpackAddRowsAVX2(dst, src, add *float32, rows, w int)

// padRowsAsm writes rows rows of [0, src row] (w+1 floats each) into dst; it
// reports false when it has no fast path for w.
func padRowsAsm(dst, src []float32, rows, w int) bool {
	if !useElemAsm() || w%8 != 0 || rows == 0 || w == 0 {
		return false
	}
	_, _ = dst[rows*(w+1)-1], src[rows*w-1]
	padRowsAVX2(&dst[0], &src[0], rows, w)
	return true
}

// unpackRowsAsm copies rows rows of w floats from src rows of w+1 (skipping
// each one's first float) into dst, adding add's rows when add is not nil;
// it reports false when it has no fast path for w.
func unpackRowsAsm(dst, src, add []float32, rows, w int) bool {
	if !useElemAsm() || w%8 != 0 || rows == 0 || w == 0 {
		return false
	}
	_, _ = dst[rows*w-1], src[rows*(w+1)-1]
	if add != nil {
		_ = add[rows*w-1]
		unpackAddRowsAVX2(&dst[0], &src[0], &add[0], rows, w)
		return true
	}
	unpackRowsAVX2(&dst[0], &src[0], rows, w)
	return true
}

//go:noescape
func splitRowsAVX2(even, odd, src *float32, rows, w int)

//go:noescape
func mergeRowsAVX2(dst, even, odd, add *float32, rows, w int)

// splitRowsAsm writes, for rows rows of src (2w floats each, 4w apart), a
// zero and the row's even elements to a row of even and likewise its odd
// elements to odd (rows w+1 apart); it reports false when it has no fast
// path for w.
func splitRowsAsm(even, odd, src []float32, rows, w int) bool {
	if !useElemAsm() || w%8 != 0 || rows == 0 || w == 0 {
		return false
	}
	_, _, _ = even[rows*(w+1)-1], odd[rows*(w+1)-1], src[(rows-1)*4*w+2*w-1]
	splitRowsAVX2(&even[0], &odd[0], &src[0], rows, w)
	return true
}

// mergeRowsAsm is splitRowsAsm's inverse: rows rows of even and odd (w+1
// floats apart, each after its first float) go alternately into rows of 2w
// floats of dst, 4w apart, plus add's (laid out as dst) when add is not
// nil; it reports false when it has no fast path for w.
func mergeRowsAsm(dst, even, odd, add []float32, rows, w int) bool {
	if !useElemAsm() || w%8 != 0 || rows == 0 || w == 0 {
		return false
	}
	last := (rows-1)*4*w + 2*w - 1
	_, _, _ = dst[last], even[rows*(w+1)-1], odd[rows*(w+1)-1]
	if add != nil {
		_ = add[last]
		mergeRowsAVX2(&dst[0], &even[0], &odd[0], &add[0], rows, w)
		return true
	}
	mergeRowsAVX2(&dst[0], &even[0], &odd[0], nil, rows, w)
	return true
}
