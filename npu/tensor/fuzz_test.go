package tensor

import (
	"math"
	"testing"
)

// FuzzConvGeometry feeds arbitrary window parameters to NewConvGeom. Whatever
// it accepts must give buffers Im2col and Col2im work in without panicking,
// an output size that matches the padded input, and an exact adjoint pair.
func FuzzConvGeometry(f *testing.F) {
	f.Add(3, 8, 7, 3, 3, 1, 1, uint8(0), 0, 0, 0, 0)
	f.Add(2, 9, 9, 7, 7, 2, 2, uint8(0), 0, 0, 0, 0)
	f.Add(1, 5, 4, 2, 3, 3, 1, uint8(1), 0, 0, 0, 0)
	f.Add(2, 4, 5, 3, 3, 2, 3, uint8(2), 2, 0, 1, 3)
	f.Add(1, 1, 1, 5, 5, 4, 4, uint8(0), 0, 0, 0, 0)
	f.Add(1, 3, 3, 3, 3, 1, 1, uint8(2), -1, 0, 0, 0)
	f.Fuzz(func(t *testing.T, c, h, w, kh, kw, sh, sw int, mode uint8, top, bottom, left, right int) {
		small := func(v int) bool { return v > -4 && v <= 12 }
		for _, v := range []int{c, h, w, kh, kw, sh, sw, top, bottom, left, right} {
			if !small(v) {
				t.Skip()
			}
		}
		pad := Padding{Mode: PadMode(mode % 4), Top: top, Bottom: bottom, Left: left, Right: right}
		g, err := NewConvGeom(c, h, w, kh, kw, sh, sw, pad)
		if err != nil {
			return
		}
		hp, wp := h+g.PadTop+g.PadBottom, w+g.PadLeft+g.PadRight
		if g.OutH < 1 || g.OutW < 1 || (g.OutH-1)*sh+kh > hp || (g.OutW-1)*sw+kw > wp {
			t.Fatalf("geometry %+v does not fit its padded input %d×%d", g, hp, wp)
		}
		x := make([]float32, g.InLen())
		y := make([]float32, g.ColRows()*g.ColCols())
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		for i := range y {
			y[i] = float32(i%5) - 2
		}
		col := make([]float32, len(y))
		Im2col(col, g.ColCols(), x, g)
		back := make([]float32, len(x))
		Col2im(back, y, g.ColCols(), g)
		var lhs, rhs float64
		for i := range y {
			lhs += float64(col[i]) * float64(y[i])
		}
		for i := range x {
			rhs += float64(x[i]) * float64(back[i])
		}
		if math.Abs(lhs-rhs) > 1e-6*(1+math.Abs(lhs)) {
			t.Fatalf("geometry %+v: <im2col x, y> = %g, <x, col2im y> = %g", g, lhs, rhs)
		}
	})
}
