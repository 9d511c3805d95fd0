package tensor

import "fmt"

// Conv3x3 runs 3×3 convolutions with zero padding over a whole N×C×H×W
// batch without im2col: with stride 1 and one pixel of padding on every
// side (MindSpore's pad_mode="same" for a 3×3 kernel), or with stride 2
// over an even-sized input whose output is half its size. The batch is held
// in a padded channel-major "shift layout", in which every one of the nine
// kernel taps is the same matrix shifted by a constant offset. The GEMM
// micro-kernels then read the input in place, tap after tap, and the input
// gradient is the same product with the transposed, mirrored kernel over
// the padded output gradient.
//
// # Shift layout
//
// Channel c of a batch occupies ChanPitch floats from c·ChanPitch. Inside it,
// after a few zeros that align the first pixel to 64 bytes, image n starts
// at lead + n·ImagePitch; row 0 of an image is zero and row h+1 holds
// row h behind one zero: element (n, c, h, w) of an OutH×OutW batch is at
//
//	c·ChanPitch + lead + n·ImagePitch + (h+1)·RowPitch + w + 1, RowPitch = OutW+1.
//
// The zero in front of a row is also the right padding of the row above, and
// the zero row of an image the bottom padding of the image before, so the
// layout wastes one column and one row per image. Positions between the
// valid ones are "padding": zero in inputs, don't-care in outputs.
//
// Outputs and output gradients (Pack, Unpack) are OutH×OutW batches in this
// layout. With stride 1 so are inputs. With stride 2 an input is split into
// its four phases, the pixels (2i+a, 2j+b) for a, b in {0, 1}, each an
// OutH×OutW batch in the layout, phase 2a+b from (2a+b)·In·ChanPitch
// (PackInput, UnpackInput): a tap then reads one phase shifted by at most
// one row and one column, and the input gradient is one product per phase
// over the taps that read it.
type Conv3x3 struct {
	// N, H, W and In describe the input batch.
	N, H, W, In, Out int
	// Stride is 1 or 2; OutH and OutW are the output's size.
	Stride, OutH, OutW int
	// RowPitch, ImagePitch and ChanPitch are the layout's strides in floats.
	RowPitch, ImagePitch, ChanPitch int

	lead   int // floats before image 0 in a channel, so that q0 is 16-aligned
	q0, q1 int // first valid position and one past the last
	cols   int // positions computed from q0: q1−q0 rounded up to whole tiles of every family
	phases int // layouts an input takes: 1, or 4 with stride 2
	// fwd holds the forward's taps, bwd the input gradient's, one product
	// per phase of the input.
	fwd      tapSet
	bwd      [4]tapSet
	arch     gemmArch
	noDirect bool // tests: always pack the taps

	fwdA   []float32    // packed forward weight panels
	bwdA   [4][]float32 // packed input-gradient weight panels, per phase
	dwRows []int        // row offsets of the input taps for the weight gradient
	dyRows []int
	prod   shiftJob
	layout layoutJob
	phase  phaseJob
	weight weightJob
	dot    dotJob
}

// tapSet is the taps of one product: for each, the kernel tap it applies
// (kh·3+kw) and the offset of the input it reads from the output position,
// in floats and in bytes.
type tapSet struct {
	n      int
	kernel [9]int
	offs   [9]int
	bytes  [9]int
}

func (s *tapSet) add(kernel, off int) {
	s.kernel[s.n], s.offs[s.n], s.bytes[s.n] = kernel, off, 4*off
	s.n++
}

const (
	// shiftBlockCols is how many positions one parallel work item covers,
	// halved (down to maxNR) until a product has at least shiftMinBlocks
	// items, so that a core slowed by other load can be helped out.
	shiftBlockCols = 8 * maxNR
	shiftMinBlocks = 32
	// shiftBlockK is the longest K block the taps are grouped into (as the
	// GEMM's gemmKC): the packed B panel of a block stays in L1.
	shiftBlockK = 256
	// MaxConv3x3Channels is the most input or output channels Conv3x3
	// takes: one tap's channels must fit in a packed panel.
	MaxConv3x3Channels = 512
)

// NewConv3x3 plans the stride-1 convolutions of an n×in×h×w batch into out
// channels, with one pixel of zero padding on every side.
func NewConv3x3(n, h, w, in, out int) (*Conv3x3, error) {
	return newConv3x3(n, h, w, in, out, 1, 1, 1)
}

// NewConv3x3Stride2 plans the stride-2 convolutions of an n×in×h×w batch
// into out channels, h and w even, with padTop rows and padLeft columns of
// zeros before the input (0 or 1 each: MindSpore's pad_mode="same" gives
// 0, an explicit padding of 1 gives 1) and zeros after it as far as the
// h/2×w/2 output reaches.
func NewConv3x3Stride2(n, h, w, in, out, padTop, padLeft int) (*Conv3x3, error) {
	if h%2 != 0 || w%2 != 0 || padTop < 0 || padTop > 1 || padLeft < 0 || padLeft > 1 {
		return nil, fmt.Errorf("3×3 stride-2 convolution of %d×%d with padding %d,%d before: want even sizes and padding 0 or 1: %w", h, w, padTop, padLeft, ErrConvGeometry)
	}
	return newConv3x3(n, h, w, in, out, 2, padTop, padLeft)
}

func newConv3x3(n, h, w, in, out, stride, padTop, padLeft int) (*Conv3x3, error) {
	if n <= 0 || h <= 0 || w <= 0 || in <= 0 || out <= 0 {
		return nil, fmt.Errorf("3×3 convolution of %d×%d×%d×%d into %d channels: sizes must be positive: %w", n, in, h, w, out, ErrConvGeometry)
	}
	if max(in, out) > MaxConv3x3Channels {
		return nil, fmt.Errorf("3×3 convolution of %d into %d channels: more than %d: %w", in, out, MaxConv3x3Channels, ErrConvGeometry)
	}
	p := &Conv3x3{N: n, H: h, W: w, In: in, Out: out, Stride: stride, OutH: h / stride, OutW: w / stride,
		phases: stride * stride, arch: bestGemmArch()}
	oh, ow := p.OutH, p.OutW
	p.RowPitch = ow + 1
	p.ImagePitch = (oh + 1) * p.RowPitch
	p.lead = (16 - (p.RowPitch+1)%16) % 16
	p.q0 = p.lead + p.RowPitch + 1
	p.q1 = p.lead + (n-1)*p.ImagePitch + oh*p.RowPitch + ow + 1
	p.cols = roundUp(p.q1-p.q0, maxNR)
	// Reads reach one row and one column past the last computed position.
	p.ChanPitch = roundUp(p.q0+p.cols+p.RowPitch+1, 16)
	if int64(p.ChanPitch)*int64(p.phases*max(in, out)) > maxElements {
		return nil, fmt.Errorf("3×3 convolution of %d×%d×%d×%d: too large: %w", n, in, h, w, ErrConvGeometry)
	}
	// Tap (kh, kw) reads input row stride·oh − padTop + kh: with stride 2,
	// row oh + d of phase a, where 2d + a = kh − padTop.
	for kh := 0; kh < 3; kh++ {
		for kw := 0; kw < 3; kw++ {
			u, v := kh-padTop, kw-padLeft
			a, b := 0, 0
			if stride == 2 {
				a, b = u&1, v&1
				u, v = (u-a)/2, (v-b)/2
			}
			shift, phase := u*p.RowPitch+v, a*2+b
			p.fwd.add(kh*3+kw, phase*in*p.ChanPitch+shift)
			p.bwd[phase].add(kh*3+kw, -shift)
		}
	}
	p.setArch(p.arch)
	p.dwRows = make([]int, 9*in)
	for c := 0; c < in; c++ {
		for t := 0; t < 9; t++ {
			p.dwRows[c*9+t] = c*p.ChanPitch + p.q0 + p.fwd.offs[t]
		}
	}
	p.dyRows = make([]int, out)
	for o := range p.dyRows {
		p.dyRows[o] = o*p.ChanPitch + p.q0
	}
	return p, nil
}

// setArch picks the kernel family (tests force each one).
func (p *Conv3x3) setArch(arch gemmArch) {
	p.arch = arch
	mr, _ := arch.tile()
	p.fwdA = make([]float32, 9*roundUp(p.Out, mr)*p.In)
	for ph := 0; ph < p.phases; ph++ {
		p.bwdA[ph] = make([]float32, p.bwd[ph].n*roundUp(p.In, mr)*p.Out)
	}
}

// tapBlocks returns how many taps form one K block for a product of taps
// taps with K = k per tap: the taps in nearly equal blocks of at most
// shiftBlockK (or one tap).
func tapBlocks(taps, k int) int {
	blocks := (taps*k + shiftBlockK - 1) / shiftBlockK
	return (taps + blocks - 1) / blocks
}

// Len returns the floats a batch of channels OutH×OutW planes takes in the
// layout.
func (p *Conv3x3) Len(channels int) int { return channels * p.ChanPitch }

// InputLen returns the floats an input batch takes in the layout (all its
// phases with stride 2).
func (p *Conv3x3) InputLen() int { return p.phases * p.In * p.ChanPitch }

// Pack writes an N×channels×OutH×OutW batch into dst in the shift layout,
// zeros included, so dst may hold anything before.
func (p *Conv3x3) Pack(w *Workers, dst, nchw []float32, channels int) {
	p.checkLayout(dst, nchw, channels)
	p.layout = layoutJob{p: p, wide: dst, nchw: nchw, channels: channels, pack: true}
	w.For(p.N, 1, &p.layout)
	p.layout = layoutJob{}
}

// Unpack copies the valid positions of src, channels OutH×OutW planes in
// the shift layout, into the N×channels×OutH×OutW batch nchw. A non-nil bias
// adds bias[c] to channel c; a non-nil add adds add's element at the same
// NCHW index.
func (p *Conv3x3) Unpack(w *Workers, nchw, src []float32, channels int, bias, add []float32) {
	p.checkLayout(src, nchw, channels)
	if (bias != nil && len(bias) < channels) || (add != nil && len(add) < len(nchw)) {
		panic("tensor: conv3x3 unpack bias or addend too short")
	}
	p.layout = layoutJob{p: p, wide: src, nchw: nchw, channels: channels, bias: bias, add: add}
	w.For(p.N*channels, channels, &p.layout)
	p.layout = layoutJob{}
}

// PackInput writes the N×In×H×W input batch nchw into dst (InputLen floats)
// in the layout the products read.
func (p *Conv3x3) PackInput(w *Workers, dst, nchw []float32) {
	if p.Stride == 1 {
		p.Pack(w, dst, nchw, p.In)
		return
	}
	p.checkInput(dst, nchw, nil)
	p.phase = phaseJob{p: p, wide: dst, nchw: nchw, pack: true}
	w.For(p.N, 1, &p.phase)
	p.phase = phaseJob{}
}

// UnpackInput copies an input gradient from src (InputLen floats) into the
// N×In×H×W batch nchw, adding add's element at the same index when add is
// not nil.
func (p *Conv3x3) UnpackInput(w *Workers, nchw, src, add []float32) {
	if p.Stride == 1 {
		p.Unpack(w, nchw, src, p.In, nil, add)
		return
	}
	p.checkInput(src, nchw, add)
	p.phase = phaseJob{p: p, wide: src, nchw: nchw, add: add}
	w.For(p.N, 1, &p.phase)
	p.phase = phaseJob{}
}

func (p *Conv3x3) checkLayout(wide, nchw []float32, channels int) {
	if len(wide) < p.Len(channels) || len(nchw) < p.N*channels*p.OutH*p.OutW {
		panic(fmt.Sprintf("tensor: conv3x3 layout buffers too small: %d and %d for %d channels", len(wide), len(nchw), channels))
	}
}

func (p *Conv3x3) checkInput(wide, nchw, add []float32) {
	n := p.N * p.In * p.H * p.W
	if len(wide) < p.InputLen() || len(nchw) < n || (add != nil && len(add) < n) {
		panic(fmt.Sprintf("tensor: conv3x3 input buffers too small: %d and %d", len(wide), len(nchw)))
	}
}

// layoutJob packs images (pack) or unpacks (image, channel) planes. Both
// split the batch by image, as the products do by position, so each worker
// keeps to the same images from one pass to the next.
type layoutJob struct {
	p          *Conv3x3
	wide, nchw []float32
	bias, add  []float32
	channels   int
	pack       bool
}

func (j *layoutJob) Range(lo, hi int) {
	p := j.p
	oh, ow := p.OutH, p.OutW
	hw, rp := oh*ow, p.RowPitch
	if j.pack {
		for c := 0; c < j.channels; c++ {
			ch := j.wide[c*p.ChanPitch : (c+1)*p.ChanPitch]
			if lo == 0 {
				clear(ch[:p.lead])
			}
			for n := lo; n < hi; n++ {
				img := ch[p.lead+n*p.ImagePitch : p.lead+(n+1)*p.ImagePitch]
				clear(img[:rp])
				src := j.nchw[(n*j.channels+c)*hw : (n*j.channels+c+1)*hw]
				padRows(img[rp:], src, oh, ow)
			}
			if hi == p.N {
				clear(ch[p.lead+p.N*p.ImagePitch:])
			}
		}
		return
	}
	for pl := lo; pl < hi; pl++ {
		n, c := pl/j.channels, pl%j.channels
		img := j.wide[c*p.ChanPitch+p.lead+n*p.ImagePitch:]
		dst := j.nchw[pl*hw : (pl+1)*hw]
		var add []float32
		if j.add != nil {
			add = j.add[pl*hw : (pl+1)*hw]
		}
		if j.bias == nil {
			unpackRows(dst, img[rp:], add, oh, ow)
			continue
		}
		bias := j.bias[c]
		for h := 0; h < oh; h++ {
			src := img[(h+1)*rp+1 : (h+1)*rp+1+ow]
			d := dst[h*ow : (h+1)*ow]
			if add != nil {
				a := add[h*ow : (h+1)*ow]
				for i, v := range src {
					d[i] = v + bias + a[i]
				}
			} else {
				for i, v := range src {
					d[i] = v + bias
				}
			}
		}
	}
}

// phaseJob packs the images lo..hi-1 of a stride-2 input into its four
// phases (pack), or gathers an input gradient back from them, adding add.
type phaseJob struct {
	p          *Conv3x3
	wide, nchw []float32
	add        []float32
	pack       bool
}

func (j *phaseJob) Range(lo, hi int) {
	p := j.p
	oh, ow, rp := p.OutH, p.OutW, p.RowPitch
	hw := p.H * p.W
	// region returns image n of channel c of phase ph in the layout.
	region := func(ph, c, n int) []float32 {
		o := (ph*p.In+c)*p.ChanPitch + p.lead + n*p.ImagePitch
		return j.wide[o : o+p.ImagePitch]
	}
	for n := lo; n < hi; n++ {
		for c := 0; c < p.In; c++ {
			plane := j.nchw[(n*p.In+c)*hw : (n*p.In+c+1)*hw]
			for a := 0; a < 2; a++ {
				// Rows 2i+a of the image are rows i of phases 2a and 2a+1.
				even, odd := region(2*a, c, n)[rp:], region(2*a+1, c, n)[rp:]
				rows := plane[a*p.W:]
				if j.pack {
					splitRows(even, odd, rows, oh, ow)
					continue
				}
				var add []float32
				if j.add != nil {
					add = j.add[(n*p.In+c)*hw+a*p.W:]
				}
				mergeRows(rows, even, odd, add, oh, ow)
			}
			if j.pack {
				for ph := 0; ph < 4; ph++ {
					clear(region(ph, c, n)[:rp])
				}
			}
		}
	}
	if !j.pack {
		return
	}
	// The zeros before the first image and after the last of each plane.
	for ph := 0; ph < 4; ph++ {
		for c := 0; c < p.In; c++ {
			ch := j.wide[(ph*p.In+c)*p.ChanPitch : (ph*p.In+c+1)*p.ChanPitch]
			if lo == 0 {
				clear(ch[:p.lead])
			}
			if hi == p.N {
				clear(ch[p.lead+p.N*p.ImagePitch:])
			}
		}
	}
}

// interleave writes d[2i] = even[i] and d[2i+1] = odd[i] (plus r's elements
// when r is not nil) for a row of len(d) floats.
func interleave(d, even, odd, r []float32) {
	half := len(d) / 2
	even, odd = even[:half], odd[:half]
	if r == nil {
		for i, v := range even {
			d[2*i], d[2*i+1] = v, odd[i]
		}
		return
	}
	r = r[:len(d)]
	for i, v := range even {
		d[2*i], d[2*i+1] = v+r[2*i], odd[i]+r[2*i+1]
	}
}

// packWeights lays out the weights [Out][In][3][3] as micro-kernel panels
// of a product over the taps ts: K block by K block, row panel by row
// panel, with K index l = (s−s0)·k + c for the s-th tap of ts in a block
// starting at its s0-th. Forward: A[o][l] = weight[o][c][tap]; for the
// input gradient, A'[c][l] = weight[o][c][tap] with o in place of c in l,
// which that product applies to the output gradient at the mirrored
// offset. The panels are spread over the workers.
func (p *Conv3x3) packWeights(w *Workers, dst, weight []float32, ts *tapSet, forward bool) {
	mr, _ := p.arch.tile()
	j := &p.weight
	*j = weightJob{p: p, ts: ts, weight: weight, forward: forward, rows: p.Out, k: p.In, dst: dst}
	if !forward {
		j.rows, j.k = p.In, p.Out
	}
	j.panels = (j.rows + mr - 1) / mr
	j.tpb = tapBlocks(ts.n, j.k)
	w.For((ts.n+j.tpb-1)/j.tpb*j.panels, 1, j)
	*j = weightJob{}
}

// weightJob packs (K block, row panel) pairs of packWeights.
type weightJob struct {
	p                    *Conv3x3
	ts                   *tapSet
	weight, dst          []float32
	forward              bool
	rows, k, panels, tpb int
}

func (j *weightJob) Range(lo, hi int) {
	mr, _ := j.p.arch.tile()
	k, in := j.k, j.p.In
	for item := lo; item < hi; item++ {
		s0, pn := item/j.panels*j.tpb, item%j.panels
		taps := min(j.tpb, j.ts.n-s0)
		kk := taps * k
		d := j.dst[s0*k*j.panels*mr+pn*kk*mr : s0*k*j.panels*mr+(pn+1)*kk*mr]
		start, valid := panelRows(j.p.arch, j.rows, pn)
		// Weight element (row r, K index c, tap) sits at wr·r + wc·c + tap.
		wr, wc := in*9, 9
		if !j.forward {
			wr, wc = 9, in*9
		}
		for s := 0; s < taps; s++ {
			tap := j.ts.kernel[s0+s]
			for c := 0; c < k; c++ {
				panel := d[(s*k+c)*mr : (s*k+c+1)*mr]
				src := j.weight[start*wr+c*wc+tap:]
				for i := range panel[:valid] {
					panel[i] = src[i*wr]
				}
				// Rows past the last are zero.
				clear(panel[valid:])
			}
		}
	}
}

// Forward writes the convolution of x (the input in the layout, InputLen
// floats, zero padding) with weight [Out][In][3][3] into y (Out channels in
// the shift layout; its padding positions get arbitrary values).
func (p *Conv3x3) Forward(w *Workers, y, x, weight []float32) {
	p.checkProduct(y, x, weight)
	p.packWeights(w, p.fwdA, weight, &p.fwd, true)
	p.run(w, y, x, p.fwdA, p.Out, p.In, &p.fwd)
}

// BackwardData writes dL/dx for the output gradient dy (Out channels in the
// shift layout, zero padding) into dx (the input's layout, InputLen floats;
// its padding positions get arbitrary values).
func (p *Conv3x3) BackwardData(w *Workers, dx, dy, weight []float32) {
	p.checkProduct(dy, dx, weight)
	for ph := 0; ph < p.phases; ph++ {
		p.packWeights(w, p.bwdA[ph], weight, &p.bwd[ph], false)
		p.run(w, dx[ph*p.In*p.ChanPitch:], dy, p.bwdA[ph], p.In, p.Out, &p.bwd[ph])
	}
}

// BackwardWeights writes dL/dweight [Out][In][3][3] for the output gradient
// dy (Out channels in the shift layout) and the forward input x (the
// input's layout), both with zero padding.
func (p *Conv3x3) BackwardWeights(w *Workers, dweight, dy, x []float32) {
	p.checkProduct(dy, x, dweight)
	p.dot.set(p.arch, dy, p.dyRows, x, p.dwRows, p.q1-p.q0, dweight, 9*p.In, p.Out+p.In)
	p.dot.run(w)
}

// checkProduct checks an output-side buffer (Out channels), an input-side
// one and the weights.
func (p *Conv3x3) checkProduct(outSide, inSide, weight []float32) {
	if len(outSide) < p.Len(p.Out) || len(inSide) < p.InputLen() || len(weight) < p.Out*p.In*9 {
		panic(fmt.Sprintf("tensor: conv3x3 buffers too small: %d, %d and %d floats", len(outSide), len(inSide), len(weight)))
	}
}

func (p *Conv3x3) run(w *Workers, y, x, a []float32, m, k int, ts *tapSet) {
	p.prod = shiftJob{p: p, y: y, x: x, a: a, m: m, k: k, ts: ts, slots: p.prod.slots}
	if workers := w.N(); len(p.prod.slots) < workers {
		p.prod.slots = append(p.prod.slots, make([][]float32, workers-len(p.prod.slots))...)
	}
	// Every worker's panel is made here, by the owner, not by the worker on
	// its first block: which workers take part in a job depends on timing,
	// so a worker joining late would allocate in a steady-state step.
	_, nr := p.arch.tile()
	tpb := tapBlocks(ts.n, k)
	for i, panel := range p.prod.slots {
		if len(panel) < tpb*k*nr {
			p.prod.slots[i] = make([]float32, tpb*MaxConv3x3Channels*maxNR)
		}
	}
	var blocks int
	p.prod.blockCols, blocks = p.blocks()
	w.forSlots(blocks, 1, &p.prod)
	p.prod.y, p.prod.x, p.prod.a, p.prod.ts = nil, nil, nil, nil
}

// blocks returns how many positions a work item of a product covers and
// how many items there are. The last item may be shorter (whole tiles):
// rounding the positions up to whole items would compute up to 255 padding
// positions more, 9% of the work for a batch of 32 8×8 images.
func (p *Conv3x3) blocks() (cols, count int) {
	cols = shiftBlockCols
	for cols > maxNR && p.cols/cols < shiftMinBlocks {
		cols /= 2
	}
	return cols, (p.cols + cols - 1) / cols
}

// shiftJob computes y[r][q] = Σ_s Σ_l A_s[r][l]·x[l][q + offs_s] over the
// taps s of ts for blocks of blockCols positions q. For each tile of nr
// positions the AVX-512 kernels read the taps in place; other families
// pack the taps of a K block into one panel (an im2col of nr columns that
// stays in L1) and run the micro-kernel once per row panel over it. Either
// way each element is one chain of multiply-adds per K block, blocks in
// order: its bits do not depend on which worker computed it.
// rangeSlot(slot, lo, hi) runs blocks lo..hi-1 with the scratch of slot.
type shiftJob struct {
	p         *Conv3x3
	y, x, a   []float32
	m, k      int
	ts        *tapSet
	blockCols int
	slots     [][]float32 // per worker: one packed B panel
}

func (j *shiftJob) rangeSlot(slot, lo, hi int) {
	p, arch := j.p, j.p.arch
	mr, nr := arch.tile()
	cp := p.ChanPitch
	panels := (j.m + mr - 1) / mr
	n := j.ts.n
	tpb := tapBlocks(n, j.k)
	var tile [maxMR * maxNR]float32
	bp := j.slots[slot] // made by run for every slot
	if p.noDirect || !hasConv3x3Direct(arch) {
		j.packedBlocks(bp, lo, hi)
		return
	}
	for blk := lo; blk < hi; blk++ {
		for q := p.q0 + blk*j.blockCols; q < p.q0+min((blk+1)*j.blockCols, p.cols); q += nr {
			for s0 := 0; s0 < n; s0 += tpb {
				taps := min(tpb, n-s0)
				kk := taps * j.k
				packed := false
				beta := float32(1)
				if s0 == 0 {
					beta = 0
				}
				for pn := 0; pn < panels; pn++ {
					start, rows := panelRows(arch, j.m, pn)
					ap := j.a[s0*j.k*panels*mr+pn*kk*mr : s0*j.k*panels*mr+(pn+1)*kk*mr]
					c := j.y[start*cp+q:]
					if !p.noDirect && conv3x3Direct(arch, rows, j.k, ap, &j.x[q], j.ts.bytes[s0:s0+taps], cp, c, cp, beta) {
						continue
					}
					if !packed {
						// Pack the block's taps into one panel: an
						// im2col of nr columns that stays in L1.
						for s := s0; s < s0+taps; s++ {
							d := bp[(s-s0)*j.k*nr : (s-s0+1)*j.k*nr]
							src := j.x[q+j.ts.offs[s]:]
							if !packCopy(arch, d, src, cp, j.k, nr) {
								packCopyGo(d, src, cp, j.k, nr, nr)
							}
						}
						packed = true
					}
					if microKernel(arch, rows, kk, ap, bp, nr, c, cp, 1, beta) {
						continue
					}
					// No kernel for this many rows: a whole tile of
					// scratch, copied in and out.
					t := tile[:mr*nr]
					if beta != 0 {
						for r := 0; r < rows; r++ {
							copy(t[r*nr:(r+1)*nr], c[r*cp:r*cp+nr])
						}
					}
					microKernel(arch, mr, kk, ap, bp, nr, t, nr, 1, beta)
					for r := 0; r < rows; r++ {
						copy(c[r*cp:r*cp+nr], t[r*nr:(r+1)*nr])
					}
				}
			}
		}
	}
}

// packedBlocks is rangeSlot for families without a direct kernel: per tile
// of nr positions and K block, the taps are packed into bp once and every
// row panel's micro-kernel runs over that panel.
func (j *shiftJob) packedBlocks(bp []float32, lo, hi int) {
	p, arch := j.p, j.p.arch
	mr, nr := arch.tile()
	cp, k, m := p.ChanPitch, j.k, j.m
	panels := (m + mr - 1) / mr
	n := j.ts.n
	tpb := tapBlocks(n, k)
	var tile [maxMR * maxNR]float32
	for q := p.q0 + lo*j.blockCols; q < p.q0+min(hi*j.blockCols, p.cols); q += nr {
		for s0 := 0; s0 < n; s0 += tpb {
			taps := min(tpb, n-s0)
			kk := taps * k
			beta := float32(1)
			if s0 == 0 {
				beta = 0
			}
			// Pack the block's taps into one panel: an im2col of nr
			// columns that stays in L1.
			b := bp[:kk*nr]
			for s := s0; s < s0+taps; s++ {
				d := b[(s-s0)*k*nr : (s-s0+1)*k*nr]
				src := j.x[q+j.ts.offs[s]:]
				if !packCopy(arch, d, src, cp, k, nr) {
					packCopyGo(d, src, cp, k, nr, nr)
				}
			}
			a := j.a[s0*k*panels*mr : (s0+taps)*k*panels*mr]
			for pn := 0; pn < panels; pn++ {
				start, rows := panelRows(arch, m, pn)
				ap, c := a[pn*kk*mr:(pn+1)*kk*mr], j.y[start*cp+q:]
				if microKernel(arch, rows, kk, ap, b, nr, c, cp, 1, beta) {
					continue
				}
				// No kernel for this many rows: a whole tile of
				// scratch, copied in and out.
				t := tile[:mr*nr]
				if beta != 0 {
					for r := 0; r < rows; r++ {
						copy(t[r*nr:(r+1)*nr], c[r*cp:r*cp+nr])
					}
				}
				microKernel(arch, mr, kk, ap, b, nr, t, nr, 1, beta)
				for r := 0; r < rows; r++ {
					copy(c[r*cp:r*cp+nr], t[r*nr:(r+1)*nr])
				}
			}
		}
	}
}

// panelRows returns the first row and the row count of row panel pn of a
// product with m rows: whole panels of mr rows, then what is left, except
// that with AVX2 (kernels for 6, 4 and 2 rows) a remainder of 2 rows and
// the panel before it become two panels of 4. The 2-row kernel has only 4
// independent chains of multiply-adds, too few to keep both FMA units busy,
// and takes about 2/3 of a 6-row panel's time for 1/3 of its work: for 32
// channels, 6+6+6+6+6+2 rows cost about 34 panel-rows of time, 6+6+6+6+4+4
// about 32.
func panelRows(arch gemmArch, m, pn int) (start, rows int) {
	mr, _ := arch.tile()
	if panels := (m + mr - 1) / mr; arch == archAVX2 && m > mr && m%mr == 2 && pn >= panels-2 {
		half := (mr + 2) / 2
		return (panels-2)*mr + (pn-(panels-2))*half, half
	}
	return pn * mr, min(mr, m-pn*mr)
}

// gatherEven writes d[i] = s[2i], four at a time so that the bounds are
// checked once per four.
func gatherEven(d, s []float32) {
	for len(d) >= 4 && len(s) >= 7 {
		d[0], d[1], d[2], d[3] = s[0], s[2], s[4], s[6]
		d, s = d[4:], s[min(8, len(s)):]
	}
	for i := range d {
		d[i] = s[2*i]
	}
}
