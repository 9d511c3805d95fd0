package tensor

import "math"

// Element-wise kernels of the layers (ReLU, BatchNorm, residual sums) over
// contiguous runs of float32. On amd64 with AVX2 and FMA3 an assembly loop
// (elementwise_amd64.s) handles whole vectors and the Go code below the rest;
// elsewhere the Go code handles everything. Each kernel's Go loop is its
// definition; the assembly fuses its multiply-adds, so the two may differ in
// the last bit, but a given CPU always takes the same path for a given
// length, so results do not depend on how work is split between workers
// as long as each run is handled whole.

// SumSquares returns Σx and Σx² accumulated in float64.
func SumSquares(x []float32) (sum, sumSq float64) {
	return sumSquares(useElemAsm(), x)
}

func sumSquares(asm bool, x []float32) (sum, sumSq float64) {
	done := 0
	if asm && len(x) >= 16 {
		done = len(x) &^ 15
		sum, sumSq = sumSqAsm(x[:done])
	}
	for _, v := range x[done:] {
		f := float64(v)
		sum += f
		sumSq += f * f
	}
	return sum, sumSq
}

// Affine writes y[i] = x[i]·s + t, plus r[i] when r is not nil, and clamps
// the result below at 0 when relu is set. y may be x or r.
func Affine(y, x, r []float32, s, t float32, relu bool) {
	affine(useElemAsm(), y, x, r, s, t, relu)
}

func affine(asm bool, y, x, r []float32, s, t float32, relu bool) {
	n := len(y)
	x = x[:n]
	if r != nil {
		r = r[:n]
	}
	done := 0
	if asm && n >= 8 {
		done = n &^ 7
		affineAsm(y[:done], x[:done], r, s, t, relu)
	}
	for i := done; i < n; i++ {
		v := x[i]*s + t
		if r != nil {
			v += r[i]
		}
		if relu {
			v = max(v, 0)
		}
		y[i] = v
	}
}

// GradSums returns Σd and Σd·x in float64, where d is dy, or, when mask is
// not nil, dy where mask > 0 and 0 elsewhere (a ReLU's gradient, mask being
// its output); then d is also written to out (which may be dy).
func GradSums(out, dy, x, mask []float32) (sumD, sumDX float64) {
	return gradSums(useElemAsm(), out, dy, x, mask)
}

func gradSums(asm bool, out, dy, x, mask []float32) (sumD, sumDX float64) {
	n := len(dy)
	x = x[:n]
	if mask != nil {
		mask, out = mask[:n], out[:n]
	}
	done := 0
	if asm && n >= 16 {
		done = n &^ 15
		if mask != nil {
			sumD, sumDX = maskedGradSumsAsm(out[:done], dy[:done], x[:done], mask[:done])
		} else {
			sumD, sumDX = gradSumsAsm(dy[:done], x[:done])
		}
	}
	for i := done; i < n; i++ {
		d := dy[i]
		if mask != nil {
			if !(mask[i] > 0) {
				d = 0
			}
			out[i] = d
		}
		sumD += float64(d)
		sumDX += float64(d) * float64(x[i])
	}
	return sumD, sumDX
}

// LinearComb writes dx[i] = a·dy[i] + (b·(x[i] − xm) + c), BatchNorm's
// input gradient. dx may be dy.
func LinearComb(dx, dy, x []float32, a, b, c, xm float32) {
	linearComb(useElemAsm(), dx, dy, x, a, b, c, xm)
}

func linearComb(asm bool, dx, dy, x []float32, a, b, c, xm float32) {
	n := len(dx)
	dy, x = dy[:n], x[:n]
	done := 0
	if asm && n >= 8 {
		done = n &^ 7
		linCombAsm(dx[:done], dy[:done], x[:done], a, b, c, xm)
	}
	for i := done; i < n; i++ {
		dx[i] = a*dy[i] + (b*(x[i]-xm) + c)
	}
}

// ReLUGrad writes out[i] = dy[i] where y[i] > 0 and 0 elsewhere. out may be
// dy.
func ReLUGrad(out, dy, y []float32) {
	reluGrad(useElemAsm(), out, dy, y)
}

func reluGrad(asm bool, out, dy, y []float32) {
	n := len(out)
	dy, y = dy[:n], y[:n]
	done := 0
	if asm && n >= 8 {
		done = n &^ 7
		reluGradAsm(out[:done], dy[:done], y[:done])
	}
	for i := done; i < n; i++ {
		if y[i] > 0 {
			out[i] = dy[i]
		} else {
			out[i] = 0
		}
	}
}

// AddTo writes out[i] = a[i] + b[i]. out may be a or b.
func AddTo(out, a, b []float32) {
	addTo(useElemAsm(), out, a, b)
}

func addTo(asm bool, out, a, b []float32) {
	n := len(out)
	a, b = a[:n], b[:n]
	done := 0
	if asm && n >= 8 {
		done = n &^ 7
		addAsm(out[:done], a[:done], b[:done])
	}
	for i := done; i < n; i++ {
		out[i] = a[i] + b[i]
	}
}

// negInf32 is −∞, the clamp that leaves every value alone.
func negInf32() float32 { return float32(math.Inf(-1)) }

// Row copies of Conv3x3's padded layout, where a row of w floats is
// preceded by a zero (rows w+1 floats apart), and of its stride-2 phases.
// Each runs the assembly when it has a fast path for w, else its Go loop.

// padRows writes rows rows of [0, src row] (w+1 floats each) into dst.
func padRows(dst, src []float32, rows, w int) {
	if !padRowsAsm(dst, src, rows, w) {
		padRowsGo(dst, src, rows, w)
	}
}

func padRowsGo(dst, src []float32, rows, w int) {
	for h := 0; h < rows; h++ {
		row := dst[h*(w+1) : (h+1)*(w+1)]
		row[0] = 0
		copy(row[1:], src[h*w:(h+1)*w])
	}
}

// unpackRows copies rows rows of w floats from src rows of w+1 (skipping
// each one's first float) into dst, adding add's rows (laid out as dst's)
// when add is not nil.
func unpackRows(dst, src, add []float32, rows, w int) {
	if !unpackRowsAsm(dst, src, add, rows, w) {
		unpackRowsGo(dst, src, add, rows, w)
	}
}

func unpackRowsGo(dst, src, add []float32, rows, w int) {
	for h := 0; h < rows; h++ {
		s := src[h*(w+1)+1 : (h+1)*(w+1)]
		d := dst[h*w : (h+1)*w]
		if add == nil {
			copy(d, s)
			continue
		}
		a := add[h*w : (h+1)*w]
		for i, v := range s {
			d[i] = v + a[i]
		}
	}
}

// splitRows writes, for rows rows of src (2w floats each, 4w apart), a zero
// and the row's even-indexed elements to a row of even, and likewise its
// odd ones to odd (rows w+1 floats apart).
func splitRows(even, odd, src []float32, rows, w int) {
	if !splitRowsAsm(even, odd, src, rows, w) {
		splitRowsGo(even, odd, src, rows, w)
	}
}

func splitRowsGo(even, odd, src []float32, rows, w int) {
	for i := 0; i < rows; i++ {
		even[i*(w+1)], odd[i*(w+1)] = 0, 0
		gatherEven(even[i*(w+1)+1:(i+1)*(w+1)], src[4*w*i:])
		gatherEven(odd[i*(w+1)+1:(i+1)*(w+1)], src[4*w*i+1:])
	}
}

// mergeRows is splitRows' inverse: rows rows of even and odd (w+1 floats
// apart, each after its first float) go alternately into rows of 2w floats
// of dst, 4w apart, plus add's (laid out as dst) when add is not nil.
func mergeRows(dst, even, odd, add []float32, rows, w int) {
	if !mergeRowsAsm(dst, even, odd, add, rows, w) {
		mergeRowsGo(dst, even, odd, add, rows, w)
	}
}

func mergeRowsGo(dst, even, odd, add []float32, rows, w int) {
	for i := 0; i < rows; i++ {
		var r []float32
		if add != nil {
			r = add[4*w*i : 4*w*i+2*w]
		}
		interleave(dst[4*w*i:4*w*i+2*w], even[i*(w+1)+1:(i+1)*(w+1)], odd[i*(w+1)+1:(i+1)*(w+1)], r)
	}
}
