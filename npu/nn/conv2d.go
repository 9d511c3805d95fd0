package nn

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/tensor"
)

// convChunkFloats bounds the scratch one convolution chunk uses (im2col
// columns, their gradient and the output block), in float32 elements. Images
// are processed in chunks so a batch of large images does not need one huge
// column matrix. The chunk size depends on the layer and input size only.
const convChunkFloats = 1 << 21

// Conv2dConfig describes a 2-D convolution. Weights are [Out, In, Kernel,
// Kernel] as in MindSpore; there is no bias unless HasBias is set (MindSpore's
// ResNet convolutions have none).
type Conv2dConfig struct {
	In, Out int
	Kernel  int
	Stride  int
	Pad     tensor.Padding // zero value: MindSpore's pad_mode="same"
	HasBias bool
}

// Conv2d is a 2-D convolution over NCHW batches, computed as im2col + GEMM
// or, for most 3×3 convolutions, by tensor.Conv3x3 without im2col.
type Conv2d struct {
	name   string
	cfg    Conv2dConfig
	weight *Param
	bias   *Param
	dev    *Device

	x, y, dx *tensor.Tensor
	geom     tensor.ConvGeom
	chunk    int // images per chunk
	// chunkFloats is convChunkFloats; tests lower it to exercise chunking.
	chunkFloats int

	// shift runs 3×3 convolutions (stride 1 pad 1, or stride 2 over an
	// even-sized input) without im2col (nil: im2col + GEMM); xs is the input
	// in its layout, kept for Backward.
	shift *tensor.Conv3x3
	xs    []float32
	// shiftMinIn is the fewest input channels for which the shift kernels
	// beat im2col (each tap is a product with K = In); tests change it.
	shiftMinIn int
	// skipInputGrad is set on a model's first layer: nothing consumes the
	// gradient of the input images, so Backward leaves dx alone.
	skipInputGrad bool

	cols   colJob
	moves  moveJob
	c2i    col2imJob
	dwPart []float32 // one chunk's weight gradient, when there are several
	// keepCols holds the whole batch's im2col columns from Forward for
	// Backward (nil: both build them chunk by chunk in scratch).
	keepCols, colBuf []float32
	rowOffs          []int
	params           []*Param
}

// defaultShiftMinIn is shiftMinIn's default: below 8 input channels a tap's
// product is too short for the micro-kernel and im2col's K = 9·In wins.
const defaultShiftMinIn = 8

// NewConv2d builds a convolution whose parameters are named name+".weight"
// (and name+".bias"), initialised from seed. dev may be nil (serial).
func NewConv2d(name string, cfg Conv2dConfig, seed uint64, dev *Device) (*Conv2d, error) {
	if cfg.In <= 0 || cfg.Out <= 0 || cfg.Kernel <= 0 || cfg.Stride <= 0 {
		return nil, fmt.Errorf("conv %s: in %d, out %d, kernel %d, stride %d must be positive: %w",
			name, cfg.In, cfg.Out, cfg.Kernel, cfg.Stride, ErrConfig)
	}
	if err := cfg.Pad.Validate(); err != nil {
		return nil, fmt.Errorf("conv %s: %w", name, err)
	}
	c := &Conv2d{name: name, cfg: cfg, dev: orSerial(dev), chunkFloats: convChunkFloats, shiftMinIn: defaultShiftMinIn}
	var err error
	if c.weight, err = newParam(name+".weight", true, cfg.Out, cfg.In, cfg.Kernel, cfg.Kernel); err != nil {
		return nil, err
	}
	initKaimingNormalFanOut(c.weight, seed)
	c.params = []*Param{c.weight}
	if cfg.HasBias {
		if c.bias, err = newParam(name+".bias", true, cfg.Out); err != nil {
			return nil, err
		}
		c.params = append(c.params, c.bias)
	}
	return c, nil
}

// Params returns weight (and bias).
func (c *Conv2d) Params() []*Param { return c.params }

// SkipInputGrad makes Backward leave dL/dx alone (its content is then
// undefined): for the first layer of a network built outside this
// package, whose input gradient nothing consumes.
func (c *Conv2d) SkipInputGrad() { c.skipInputGrad = true }

// Geometry returns the geometry of the last Forward.
func (c *Conv2d) Geometry() tensor.ConvGeom { return c.geom }

func (c *Conv2d) prepare(x *tensor.Tensor) error {
	n, h, w := x.Dim(0), x.Dim(2), x.Dim(3)
	g := c.geom
	if c.y == nil || c.y.Dim(0) != n || g.H != h || g.W != w {
		var err error
		if g, err = tensor.NewConvGeom(c.cfg.In, h, w, c.cfg.Kernel, c.cfg.Kernel, c.cfg.Stride, c.cfg.Stride, c.cfg.Pad); err != nil {
			return fmt.Errorf("conv %s: input %v: %w", c.name, x.Shape(), err)
		}
		c.geom = g
	}
	var err error
	if c.y, err = c.dev.ensure(c.name, "output", c.y, n, c.cfg.Out, g.OutH, g.OutW); err != nil {
		return fmt.Errorf("conv %s output: %w", c.name, err)
	}
	if c.dx, err = c.dev.ensure(c.name, "input gradient", c.dx, x.Shape()...); err != nil {
		return fmt.Errorf("conv %s input gradient: %w", c.name, err)
	}
	// 3×3 convolutions take the shift kernels: with stride 1 and one pixel
	// of padding on every side, or with stride 2 over an even-sized input
	// that gives an output of half its size.
	fits := g.KH == 3 && g.KW == 3 && c.cfg.In >= c.shiftMinIn && max(c.cfg.In, c.cfg.Out) <= tensor.MaxConv3x3Channels
	stride1 := fits && g.StrideH == 1 && g.StrideW == 1 &&
		g.PadTop == 1 && g.PadBottom == 1 && g.PadLeft == 1 && g.PadRight == 1
	stride2 := fits && g.StrideH == 2 && g.StrideW == 2 && h%2 == 0 && w%2 == 0 &&
		g.OutH == h/2 && g.OutW == w/2 && g.PadTop <= 1 && g.PadLeft <= 1
	switch {
	case !stride1 && !stride2:
		if c.xs != nil {
			c.dev.mem.release(c.name, "packed input")
		}
		c.shift, c.xs = nil, nil
	case c.shift == nil || c.shift.N != n || c.shift.H != h || c.shift.W != w:
		if stride1 {
			c.shift, err = tensor.NewConv3x3(n, h, w, c.cfg.In, c.cfg.Out)
		} else {
			c.shift, err = tensor.NewConv3x3Stride2(n, h, w, c.cfg.In, c.cfg.Out, g.PadTop, g.PadLeft)
		}
		if err != nil {
			return fmt.Errorf("conv %s: input %v: %w", c.name, x.Shape(), err)
		}
		if c.xs, err = c.dev.floats(c.name, "packed input", c.xs, c.shift.InputLen()); err != nil {
			return fmt.Errorf("conv %s: %w", c.name, err)
		}
	}
	c.keepCols = nil
	if c.shift != nil {
		return nil
	}
	per := 2*g.ColRows()*g.ColCols() + c.cfg.Out*g.ColCols()
	c.chunk = max(1, min(n, c.chunkFloats/max(1, per)))
	// When the whole batch's columns are small enough, Forward builds them
	// once in a buffer of the layer and Backward reuses them.
	if cols := g.ColRows() * g.ColCols() * n; cols <= 2*c.chunkFloats {
		c.chunk = n
		if c.colBuf, err = c.dev.floats(c.name, "columns", c.colBuf, cols); err != nil {
			return fmt.Errorf("conv %s: %w", c.name, err)
		}
		c.keepCols = c.colBuf
	}
	if len(c.rowOffs) < c.cfg.Out+g.ColRows() {
		c.rowOffs = make([]int, c.cfg.Out+g.ColRows())
	}
	return nil
}

// Forward computes the convolution of x, an [N In H W] batch.
func (c *Conv2d) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	if err := checkImage("conv", c.name, x, c.cfg.In); err != nil {
		return nil, err
	}
	if err := c.prepare(x); err != nil {
		return nil, err
	}
	c.x = x
	g, n := c.geom, x.Dim(0)
	k, p, out := g.ColRows(), g.ColCols(), c.cfg.Out
	w := c.dev.workers
	if s := c.shift; s != nil {
		ys, err := c.dev.scratchFloats(s.Len(out))
		if err != nil {
			return nil, fmt.Errorf("conv %s: %w", c.name, err)
		}
		s.PackInput(w, c.xs, x.Data())
		s.Forward(w, ys, c.xs, c.weight.Value.Data())
		var bias []float32
		if c.bias != nil {
			bias = c.bias.Value.Data()
		}
		s.Unpack(w, c.y.Data(), ys, out, bias, nil)
		return c.y, nil
	}
	for n0 := 0; n0 < n; n0 += c.chunk {
		gg := min(c.chunk, n-n0)
		ld := gg * p
		buf, err := c.dev.scratchFloats(k*ld + out*ld)
		if err != nil {
			return nil, fmt.Errorf("conv %s: %w", c.name, err)
		}
		col, res := buf[:k*ld], buf[k*ld:]
		if c.keepCols != nil {
			col, res = c.keepCols, buf[:out*ld]
		}
		c.cols = colJob{col: col, ld: ld, img: x.Data(), n0: n0, g: g}
		w.For(gg, 1, &c.cols)
		w.Gemm(false, false, out, ld, k, 1, c.weight.Value.Data(), k, col, ld, 0, res, ld)
		c.moves = moveJob{block: res, ld: ld, nchw: c.y.Data(), n0: n0, channels: out, plane: p, toNCHW: true}
		if c.bias != nil {
			c.moves.bias = c.bias.Value.Data()
		}
		w.For(gg, 1, &c.moves)
	}
	c.cols, c.moves = colJob{}, moveJob{}
	return c.y, nil
}

// Backward computes the weight gradient and dL/dx for dy, an [N Out OH OW]
// batch.
func (c *Conv2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	return c.backward(dy, nil)
}

// backward is Backward with add (dx's shape, or nil) added to dL/dx: a
// residual block's shortcut gradient.
func (c *Conv2d) backward(dy *tensor.Tensor, add []float32) (*tensor.Tensor, error) {
	if err := checkGrad("conv", c.name, c.y, dy); err != nil {
		return nil, err
	}
	if c.x == nil {
		return nil, fmt.Errorf("conv %s: %w", c.name, ErrNoForward)
	}
	g, n := c.geom, c.x.Dim(0)
	k, p, out := g.ColRows(), g.ColCols(), c.cfg.Out
	w := c.dev.workers
	wv, dw := c.weight.Value.Data(), c.weight.Grad.Data()
	if c.bias != nil {
		c.biasGrad(dy.Data(), n, p)
	}
	if s := c.shift; s != nil {
		buf, err := c.dev.scratchFloats(s.Len(out) + s.InputLen())
		if err != nil {
			return nil, fmt.Errorf("conv %s: %w", c.name, err)
		}
		dys, dxs := buf[:s.Len(out)], buf[s.Len(out):]
		s.Pack(w, dys, dy.Data(), out)
		s.BackwardWeights(w, dw, dys, c.xs)
		if !c.skipInputGrad {
			s.BackwardData(w, dxs, dys, wv)
			s.UnpackInput(w, c.dx.Data(), dxs, add)
		}
		return c.dx, nil
	}
	if len(c.dwPart) < len(dw) && c.chunk < n {
		var err error
		if c.dwPart, err = c.dev.floats(c.name, "weight gradient parts", c.dwPart, len(dw)); err != nil {
			return nil, fmt.Errorf("conv %s: %w", c.name, err)
		}
	}
	for n0 := 0; n0 < n; n0 += c.chunk {
		gg := min(c.chunk, n-n0)
		ld := gg * p
		buf, err := c.dev.scratchFloats(2*k*ld + out*ld)
		if err != nil {
			return nil, fmt.Errorf("conv %s: %w", c.name, err)
		}
		col, dcol, dres := buf[:k*ld], buf[k*ld:2*k*ld], buf[2*k*ld:]
		if c.keepCols != nil {
			col = c.keepCols
		} else {
			c.cols = colJob{col: col, ld: ld, img: c.x.Data(), n0: n0, g: g}
			w.For(gg, 1, &c.cols)
		}
		c.moves = moveJob{block: dres, ld: ld, nchw: dy.Data(), n0: n0, channels: out, plane: p}
		w.For(gg, 1, &c.moves)
		// dW = dres·colᵀ: both run along the pixels, which the dot kernels
		// read in place.
		if n0 == 0 {
			w.GemmNT(out, k, ld, dres, ld, col, ld, dw, k, c.rowOffs)
		} else {
			part := c.dwPart[:len(dw)]
			w.GemmNT(out, k, ld, dres, ld, col, ld, part, k, c.rowOffs)
			for i, v := range part {
				dw[i] += v
			}
		}
		if c.skipInputGrad {
			continue
		}
		w.Gemm(true, false, k, ld, out, 1, wv, k, dres, ld, 0, dcol, ld)
		c.c2i = col2imJob{img: c.dx.Data(), col: dcol, ld: ld, n0: n0, g: g, add: add}
		w.For(gg, 1, &c.c2i)
	}
	c.cols, c.moves, c.c2i = colJob{}, moveJob{}, col2imJob{}
	return c.dx, nil
}

// biasGrad writes the bias gradient: the sum of dy over each channel.
func (c *Conv2d) biasGrad(dy []float32, n, plane int) {
	db, out := c.bias.Grad.Data(), c.cfg.Out
	for o := 0; o < out; o++ {
		var s float32
		for i := 0; i < n; i++ {
			for _, v := range dy[(i*out+o)*plane : (i*out+o+1)*plane] {
				s += v
			}
		}
		db[o] = s
	}
}

// colJob runs Im2col for images n0+i, i in the range, into columns i·P.
type colJob struct {
	col, img []float32
	ld, n0   int
	g        tensor.ConvGeom
}

func (j *colJob) Range(lo, hi int) {
	in, p := j.g.InLen(), j.g.ColCols()
	for i := lo; i < hi; i++ {
		tensor.Im2col(j.col[i*p:], j.ld, j.img[(j.n0+i)*in:], j.g)
	}
}

// col2imJob rebuilds dL/dx for images n0+i from column gradients, starting
// from zero or from add's images.
type col2imJob struct {
	img, col, add []float32
	ld, n0        int
	g             tensor.ConvGeom
}

func (j *col2imJob) Range(lo, hi int) {
	in, p := j.g.InLen(), j.g.ColCols()
	for i := lo; i < hi; i++ {
		dst := j.img[(j.n0+i)*in : (j.n0+i+1)*in]
		if j.add != nil {
			copy(dst, j.add[(j.n0+i)*in:(j.n0+i+1)*in])
		} else {
			clear(dst)
		}
		tensor.Col2im(dst, j.col[i*p:], j.ld, j.g)
	}
}

// moveJob copies between a channel-major block [channels, chunk·plane] and
// the NCHW tensor for images n0+i (adding a per-channel bias on the way in).
type moveJob struct {
	block, nchw, bias []float32
	ld, n0            int
	channels, plane   int
	toNCHW            bool
}

func (j *moveJob) Range(lo, hi int) {
	p := j.plane
	for i := lo; i < hi; i++ {
		for ch := 0; ch < j.channels; ch++ {
			b := j.block[ch*j.ld+i*p : ch*j.ld+(i+1)*p]
			t := j.nchw[((j.n0+i)*j.channels+ch)*p : ((j.n0+i)*j.channels+ch+1)*p]
			if !j.toNCHW {
				copy(b, t)
				continue
			}
			if j.bias == nil {
				copy(t, b)
				continue
			}
			bv := j.bias[ch]
			for q := range t {
				t[q] = b[q] + bv
			}
		}
	}
}
