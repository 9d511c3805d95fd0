package tensor

import "fmt"

// PadMode selects how a convolution or pooling window treats the border,
// with MindSpore's names: "same", "valid" and "pad".
type PadMode int

const (
	// PadSame gives ceil(in/stride) outputs; the padding it needs is split
	// with the odd element at the bottom/right, as MindSpore's pad_mode="same".
	PadSame PadMode = iota
	// PadValid uses no padding: ceil((in-kernel+1)/stride) outputs.
	PadValid
	// PadExplicit uses the Padding's Top, Bottom, Left and Right.
	PadExplicit
)

// String returns MindSpore's name for the mode.
func (m PadMode) String() string {
	switch m {
	case PadSame:
		return "same"
	case PadValid:
		return "valid"
	case PadExplicit:
		return "pad"
	}
	return fmt.Sprintf("PadMode(%d)", int(m))
}

// ParsePadMode maps MindSpore's pad_mode strings to a PadMode.
func ParsePadMode(s string) (PadMode, error) {
	switch s {
	case "same":
		return PadSame, nil
	case "valid":
		return PadValid, nil
	case "pad":
		return PadExplicit, nil
	}
	return 0, fmt.Errorf("pad mode %q: want same, valid or pad: %w", s, ErrConvGeometry)
}

// Padding is a pad mode with the explicit amounts PadExplicit uses.
type Padding struct {
	Mode                     PadMode
	Top, Bottom, Left, Right int
}

// Validate checks the mode and that explicit amounts are not negative.
func (p Padding) Validate() error {
	switch p.Mode {
	case PadSame, PadValid:
		return nil
	case PadExplicit:
		if p.Top < 0 || p.Bottom < 0 || p.Left < 0 || p.Right < 0 {
			return fmt.Errorf("padding %d,%d,%d,%d is negative: %w", p.Top, p.Bottom, p.Left, p.Right, ErrConvGeometry)
		}
		return nil
	}
	return fmt.Errorf("pad mode %v: %w", p.Mode, ErrConvGeometry)
}

// ConvGeom is the geometry of a 2-D convolution or pooling window over one
// C×H×W image: kernel KH×KW, strides, the padding on each side and the
// OutH×OutW output it gives. Dilation is 1.
type ConvGeom struct {
	C, H, W                              int
	KH, KW                               int
	StrideH, StrideW                     int
	PadTop, PadBottom, PadLeft, PadRight int
	OutH, OutW                           int
}

// NewConvGeom computes the geometry of a kh×kw window with the given strides
// and padding over a c×h×w input.
func NewConvGeom(c, h, w, kh, kw, strideH, strideW int, pad Padding) (ConvGeom, error) {
	g := ConvGeom{C: c, H: h, W: w, KH: kh, KW: kw, StrideH: strideH, StrideW: strideW}
	if c <= 0 || h <= 0 || w <= 0 || kh <= 0 || kw <= 0 || strideH <= 0 || strideW <= 0 {
		return g, fmt.Errorf("input %d×%d×%d, kernel %d×%d, stride %d×%d: sizes must be positive: %w",
			c, h, w, kh, kw, strideH, strideW, ErrConvGeometry)
	}
	if err := pad.Validate(); err != nil {
		return g, err
	}
	switch pad.Mode {
	case PadSame:
		g.OutH, g.PadTop, g.PadBottom = samePadding(h, kh, strideH)
		g.OutW, g.PadLeft, g.PadRight = samePadding(w, kw, strideW)
	case PadExplicit:
		g.PadTop, g.PadBottom, g.PadLeft, g.PadRight = pad.Top, pad.Bottom, pad.Left, pad.Right
	}
	if pad.Mode != PadSame {
		hp, wp := h+g.PadTop+g.PadBottom, w+g.PadLeft+g.PadRight
		if hp < kh || wp < kw {
			return g, fmt.Errorf("kernel %d×%d larger than padded input %d×%d: %w", kh, kw, hp, wp, ErrConvGeometry)
		}
		g.OutH = (hp-kh)/strideH + 1
		g.OutW = (wp-kw)/strideW + 1
	}
	return g, nil
}

// samePadding returns MindSpore's "same" output size and the padding before
// and after: out = ceil(in/stride), the smaller half of the padding first.
func samePadding(in, k, stride int) (out, before, after int) {
	out = (in + stride - 1) / stride
	need := max(0, (out-1)*stride+k-in)
	return out, need / 2, need - need/2
}

// ColRows returns C·KH·KW, the rows of the im2col matrix.
func (g ConvGeom) ColRows() int { return g.C * g.KH * g.KW }

// ColCols returns OutH·OutW, the columns of one image's im2col matrix.
func (g ConvGeom) ColCols() int { return g.OutH * g.OutW }

// InLen returns C·H·W, the elements of one input image.
func (g ConvGeom) InLen() int { return g.C * g.H * g.W }

// validOut returns the outputs o in [0, out) whose input index o·stride−off
// falls in [0, size).
func validOut(out, stride, off, size int) (lo, hi int) {
	if off > 0 {
		lo = min(out, (off+stride-1)/stride)
	}
	last := size - 1 + off
	if last < 0 {
		return 0, 0
	}
	return lo, max(lo, min(out, last/stride+1))
}

func (g ConvGeom) checkCol(col []float32, ldcol int, img []float32) {
	rows, cols := g.ColRows(), g.ColCols()
	if ldcol < cols || len(col) < (rows-1)*ldcol+cols || len(img) < g.InLen() {
		panic(fmt.Sprintf("tensor: im2col buffers too small: col %d (ld %d) for %d×%d, image %d for %d",
			len(col), ldcol, rows, cols, len(img), g.InLen()))
	}
}

// Im2col copies the receptive fields of one C×H×W image into col, the
// (C·KH·KW)×(OutH·OutW) matrix whose row (c·KH+kh)·KW+kw holds, at column
// oh·OutW+ow, input pixel (c, oh·StrideH−PadTop+kh, ow·StrideW−PadLeft+kw),
// or 0 where that pixel lies in the padding. Rows are ldcol apart, so several
// images can sit side by side in one wider matrix.
func Im2col(col []float32, ldcol int, img []float32, g ConvGeom) {
	g.checkCol(col, ldcol, img)
	hw, ow := g.H*g.W, g.OutW
	for c := 0; c < g.C; c++ {
		plane := img[c*hw : (c+1)*hw]
		for kh := 0; kh < g.KH; kh++ {
			for kw := 0; kw < g.KW; kw++ {
				row := col[((c*g.KH+kh)*g.KW+kw)*ldcol:]
				off := g.PadLeft - kw
				lo, hi := validOut(ow, g.StrideW, off, g.W)
				for oh := 0; oh < g.OutH; oh++ {
					dst := row[oh*ow : (oh+1)*ow]
					ih := oh*g.StrideH - g.PadTop + kh
					if ih < 0 || ih >= g.H {
						clear(dst)
						continue
					}
					src := plane[ih*g.W : (ih+1)*g.W]
					clear(dst[:lo])
					clear(dst[hi:])
					if hi <= lo {
						continue
					}
					if g.StrideW == 1 {
						copy(dst[lo:hi], src[lo-off:hi-off])
						continue
					}
					for o := lo; o < hi; o++ {
						dst[o] = src[o*g.StrideW-off]
					}
				}
			}
		}
	}
}

// Col2im is the adjoint of Im2col: it adds every element of col back onto the
// image pixel it was copied from (padding positions are dropped). The caller
// zeroes img first for a plain scatter.
func Col2im(img []float32, col []float32, ldcol int, g ConvGeom) {
	g.checkCol(col, ldcol, img)
	hw, ow := g.H*g.W, g.OutW
	for c := 0; c < g.C; c++ {
		plane := img[c*hw : (c+1)*hw]
		for kh := 0; kh < g.KH; kh++ {
			for kw := 0; kw < g.KW; kw++ {
				row := col[((c*g.KH+kh)*g.KW+kw)*ldcol:]
				off := g.PadLeft - kw
				lo, hi := validOut(ow, g.StrideW, off, g.W)
				for oh := 0; oh < g.OutH; oh++ {
					ih := oh*g.StrideH - g.PadTop + kh
					if ih < 0 || ih >= g.H || hi <= lo {
						continue
					}
					src := row[oh*ow : (oh+1)*ow]
					dst := plane[ih*g.W : (ih+1)*g.W]
					if g.StrideW == 1 {
						d := dst[lo-off : hi-off]
						s := src[lo:hi]
						for i := range d {
							d[i] += s[i]
						}
						continue
					}
					for o := lo; o < hi; o++ {
						dst[o*g.StrideW-off] += src[o]
					}
				}
			}
		}
	}
}
