package tensor

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestNewConvGeom(t *testing.T) {
	tests := []struct {
		name                    string
		c, h, w, kh, kw, sh, sw int
		pad                     Padding
		outH, outW, top, bottom int
		left, right             int
	}{
		// ResNet-50 conv1 on 224×224: MindSpore "same" pads 2 before, 3 after.
		{"conv1_same_224", 3, 224, 224, 7, 7, 2, 2, Padding{Mode: PadSame}, 112, 112, 2, 3, 2, 3},
		// 3×3 stride 2 on 56: one row of padding, at the bottom.
		{"3x3_s2_same_56", 64, 56, 56, 3, 3, 2, 2, Padding{Mode: PadSame}, 28, 28, 0, 1, 0, 1},
		{"3x3_s1_same_32", 16, 32, 32, 3, 3, 1, 1, Padding{Mode: PadSame}, 32, 32, 1, 1, 1, 1},
		{"1x1_s2_same_32", 16, 32, 32, 1, 1, 2, 2, Padding{Mode: PadSame}, 16, 16, 0, 0, 0, 0},
		{"3x3_valid_7", 1, 7, 5, 3, 3, 2, 1, Padding{Mode: PadValid}, 3, 3, 0, 0, 0, 0},
		{"pad_explicit", 2, 5, 5, 3, 3, 2, 2, Padding{Mode: PadExplicit, Top: 1, Bottom: 1, Left: 0, Right: 2}, 3, 3, 1, 1, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := NewConvGeom(tt.c, tt.h, tt.w, tt.kh, tt.kw, tt.sh, tt.sw, tt.pad)
			if err != nil {
				t.Fatal(err)
			}
			if g.OutH != tt.outH || g.OutW != tt.outW || g.PadTop != tt.top || g.PadBottom != tt.bottom ||
				g.PadLeft != tt.left || g.PadRight != tt.right {
				t.Fatalf("geometry %+v, want out %d×%d pads t%d b%d l%d r%d", g, tt.outH, tt.outW, tt.top, tt.bottom, tt.left, tt.right)
			}
		})
	}
	for _, bad := range []struct {
		name          string
		c, h, w, k, s int
		pad           Padding
	}{
		{"zero_channels", 0, 4, 4, 3, 1, Padding{}},
		{"zero_stride", 1, 4, 4, 3, 0, Padding{}},
		{"kernel_too_big", 1, 2, 2, 3, 1, Padding{Mode: PadValid}},
		{"negative_pad", 1, 4, 4, 3, 1, Padding{Mode: PadExplicit, Top: -1}},
		{"unknown_mode", 1, 4, 4, 3, 1, Padding{Mode: PadMode(9)}},
	} {
		if _, err := NewConvGeom(bad.c, bad.h, bad.w, bad.k, bad.k, bad.s, bad.s, bad.pad); !errors.Is(err, ErrConvGeometry) {
			t.Errorf("%s: err = %v, want ErrConvGeometry", bad.name, err)
		}
	}
	if m, err := ParsePadMode("same"); err != nil || m != PadSame || m.String() != "same" {
		t.Fatalf("ParsePadMode(same) = %v, %v", m, err)
	}
	if _, err := ParsePadMode("SAME"); err == nil {
		t.Fatal("ParsePadMode accepted SAME")
	}
}

// convDirect is the textbook convolution (cross-correlation) of one image.
func convDirect(img, weight []float32, cout int, g ConvGeom) []float64 {
	out := make([]float64, cout*g.OutH*g.OutW)
	for o := 0; o < cout; o++ {
		for oh := 0; oh < g.OutH; oh++ {
			for ow := 0; ow < g.OutW; ow++ {
				var s float64
				for c := 0; c < g.C; c++ {
					for kh := 0; kh < g.KH; kh++ {
						for kw := 0; kw < g.KW; kw++ {
							ih, iw := oh*g.StrideH-g.PadTop+kh, ow*g.StrideW-g.PadLeft+kw
							if ih < 0 || ih >= g.H || iw < 0 || iw >= g.W {
								continue
							}
							s += float64(img[(c*g.H+ih)*g.W+iw]) * float64(weight[((o*g.C+c)*g.KH+kh)*g.KW+kw])
						}
					}
				}
				out[(o*g.OutH+oh)*g.OutW+ow] = s
			}
		}
	}
	return out
}

func convGeoms(t *testing.T) []ConvGeom {
	var gs []ConvGeom
	for _, p := range []struct {
		c, h, w, kh, kw, sh, sw int
		pad                     Padding
	}{
		{3, 9, 7, 3, 3, 1, 1, Padding{Mode: PadSame}},
		{2, 9, 8, 3, 3, 2, 2, Padding{Mode: PadSame}},
		{2, 11, 11, 7, 7, 2, 2, Padding{Mode: PadSame}},
		{4, 6, 6, 1, 1, 2, 2, Padding{Mode: PadSame}},
		{1, 5, 6, 2, 3, 1, 2, Padding{Mode: PadValid}},
		{2, 4, 5, 3, 3, 3, 1, Padding{Mode: PadExplicit, Top: 2, Bottom: 0, Left: 1, Right: 3}},
		{1, 1, 1, 3, 3, 1, 1, Padding{Mode: PadSame}},
	} {
		g, err := NewConvGeom(p.c, p.h, p.w, p.kh, p.kw, p.sh, p.sw, p.pad)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	return gs
}

func TestIm2colGemmIsConvolution(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, g := range convGeoms(t) {
		const cout, images = 3, 2
		p := g.ColCols()
		imgs := randSlice(r, images*g.InLen())
		weight := randSlice(r, cout*g.ColRows())
		// Two images side by side in one column matrix, poisoned first so
		// every element must be written.
		col := make([]float32, g.ColRows()*images*p)
		for i := range col {
			col[i] = float32(math.NaN())
		}
		for n := 0; n < images; n++ {
			Im2col(col[n*p:], images*p, imgs[n*g.InLen():], g)
		}
		out := make([]float32, cout*images*p)
		Gemm(false, false, cout, images*p, g.ColRows(), 1, weight, g.ColRows(), col, images*p, 0, out, images*p)
		for n := 0; n < images; n++ {
			want := convDirect(imgs[n*g.InLen():], weight, cout, g)
			for o := 0; o < cout; o++ {
				for q := 0; q < p; q++ {
					got := float64(out[o*images*p+n*p+q])
					if d := math.Abs(got - want[o*p+q]); d > 1e-4*(1+math.Abs(want[o*p+q])) {
						t.Fatalf("geometry %+v image %d out[%d,%d] = %g, want %g", g, n, o, q, got, want[o*p+q])
					}
				}
			}
		}
	}
}

// TestCol2imIsAdjoint checks <Im2col(x), y> == <x, Col2im(y)>, which is what
// makes Col2im the exact backward pass of Im2col.
func TestCol2imIsAdjoint(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, g := range convGeoms(t) {
		x := randSlice(r, g.InLen())
		y := randSlice(r, g.ColRows()*g.ColCols())
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
		if math.Abs(lhs-rhs) > 1e-4*(1+math.Abs(lhs)) {
			t.Fatalf("geometry %+v: <im2col x, y> = %g, <x, col2im y> = %g", g, lhs, rhs)
		}
	}
}

func TestIm2colPanicsOnShortBuffer(t *testing.T) {
	g, _ := NewConvGeom(1, 4, 4, 3, 3, 1, 1, Padding{Mode: PadSame})
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a short column buffer")
		}
	}()
	Im2col(make([]float32, 10), 16, make([]float32, 16), g)
}
