package tensor

import (
	"fmt"
	"sync/atomic"
)

// Conv3x3 runs 3×3 convolutions with stride 1 and one pixel of zero padding
// on every side (MindSpore's pad_mode="same" for a 3×3 kernel) over a whole
// N×C×H×W batch without im2col: the batch is held in a padded channel-major
// "shift layout", in which every one of the nine kernel taps is the same
// matrix shifted by a constant offset. The GEMM micro-kernels then read the
// input in place, tap after tap, and the input gradient is the same product
// with the transposed, mirrored kernel over the padded output gradient.
//
// # Shift layout
//
// Channel c of a batch occupies ChanPitch floats from c·ChanPitch. Inside it,
// after a few zeros that align the first pixel to 64 bytes, image n starts
// at lead + n·ImagePitch; row 0 of an image is zero and row h+1 holds input
// row h behind one zero: element (n, c, h, w) is at
//
//	c·ChanPitch + lead + n·ImagePitch + (h+1)·RowPitch + w + 1, RowPitch = W+1.
//
// The zero in front of a row is also the right padding of the row above, and
// the zero row of an image the bottom padding of the image before, so the
// layout wastes one column and one row per image. Positions between the
// valid ones are "padding": zero in inputs, don't-care in outputs.
type Conv3x3 struct {
	N, H, W, In, Out int
	// RowPitch, ImagePitch and ChanPitch are the layout's strides in floats.
	RowPitch, ImagePitch, ChanPitch int

	lead   int // floats before image 0 in a channel, so that q0 is 16-aligned
	q0, q1 int // first valid position and one past the last
	cols   int // positions computed from q0: q1−q0 rounded up to whole tiles
	taps   [9]int
	// tapBytes[0] holds the taps in bytes, tapBytes[1] the mirrored ones
	// (the input gradient's), for the direct kernels.
	tapBytes [2][9]int
	arch     gemmArch
	noDirect bool // tests: always pack the taps

	tapsPerBlock int       // taps whose products form one K block (one micro-kernel chain)
	fwdA, bwdA   []float32 // packed weight panels (forward, input gradient)
	dwRows       []int     // row offsets of the input taps for the weight gradient
	dyRows       []int
	prod         shiftJob
	layout       layoutJob
	dot          dotJob
}

const (
	// shiftBlockCols is how many positions one parallel work item covers.
	shiftBlockCols = 8 * maxNR
	// shiftBlockK is the longest K block the taps are grouped into (as the
	// GEMM's gemmKC): the packed B panel of a block stays in L1.
	shiftBlockK = 256
	// MaxConv3x3Channels is the most input or output channels Conv3x3
	// takes: one tap's channels must fit in a packed panel.
	MaxConv3x3Channels = 512
)

// NewConv3x3 plans the convolutions of an n×in×h×w batch into out channels.
func NewConv3x3(n, h, w, in, out int) (*Conv3x3, error) {
	if n <= 0 || h <= 0 || w <= 0 || in <= 0 || out <= 0 {
		return nil, fmt.Errorf("3×3 convolution of %d×%d×%d×%d into %d channels: sizes must be positive: %w", n, in, h, w, out, ErrConvGeometry)
	}
	p := &Conv3x3{N: n, H: h, W: w, In: in, Out: out, arch: bestGemmArch()}
	p.RowPitch = w + 1
	p.ImagePitch = (h + 1) * p.RowPitch
	p.lead = (16 - (p.RowPitch+1)%16) % 16
	p.q0 = p.lead + p.RowPitch + 1
	p.q1 = p.lead + (n-1)*p.ImagePitch + h*p.RowPitch + w + 1
	p.cols = roundUp(p.q1-p.q0, shiftBlockCols)
	// Reads reach one row and one column past the last computed position.
	p.ChanPitch = roundUp(p.q0+p.cols+p.RowPitch+1, 16)
	for kh := 0; kh < 3; kh++ {
		for kw := 0; kw < 3; kw++ {
			p.taps[kh*3+kw] = (kh-1)*p.RowPitch + kw - 1
			p.tapBytes[0][kh*3+kw] = 4 * p.taps[kh*3+kw]
			p.tapBytes[1][kh*3+kw] = -4 * p.taps[kh*3+kw]
		}
	}
	if max(in, out) > MaxConv3x3Channels {
		return nil, fmt.Errorf("3×3 convolution of %d into %d channels: more than %d: %w", in, out, MaxConv3x3Channels, ErrConvGeometry)
	}
	if int64(p.ChanPitch)*int64(max(in, out)) > maxElements {
		return nil, fmt.Errorf("3×3 convolution of %d×%d×%d×%d: too large: %w", n, in, h, w, ErrConvGeometry)
	}
	p.setArch(p.arch)
	p.dwRows = make([]int, 9*in)
	for c := 0; c < in; c++ {
		for t := 0; t < 9; t++ {
			p.dwRows[c*9+t] = c*p.ChanPitch + p.q0 + p.taps[t]
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
	p.bwdA = make([]float32, 9*roundUp(p.In, mr)*p.Out)
}

// tapBlocks returns how many taps form one K block for a product with K = k
// per tap: the nine taps in nearly equal blocks of at most shiftBlockK
// (or one tap).
func tapBlocks(k int) int {
	blocks := (9*k + shiftBlockK - 1) / shiftBlockK
	return (9 + blocks - 1) / blocks
}

// Len returns the floats a batch of channels planes takes in the layout.
func (p *Conv3x3) Len(channels int) int { return channels * p.ChanPitch }

// Pack writes an N×channels×H×W batch into dst in the shift layout, zeros
// included, so dst may hold anything before.
func (p *Conv3x3) Pack(w *Workers, dst, nchw []float32, channels int) {
	p.checkLayout(dst, nchw, channels)
	p.layout = layoutJob{p: p, wide: dst, nchw: nchw, channels: channels, pack: true}
	w.For(channels, 1, &p.layout)
	p.layout = layoutJob{}
}

// Unpack copies the valid positions of src, channels planes in the shift
// layout, into the N×channels×H×W batch nchw. A non-nil bias adds bias[c] to
// channel c; a non-nil add adds add's element at the same NCHW index.
func (p *Conv3x3) Unpack(w *Workers, nchw, src []float32, channels int, bias, add []float32) {
	p.checkLayout(src, nchw, channels)
	if (bias != nil && len(bias) < channels) || (add != nil && len(add) < len(nchw)) {
		panic("tensor: conv3x3 unpack bias or addend too short")
	}
	p.layout = layoutJob{p: p, wide: src, nchw: nchw, channels: channels, bias: bias, add: add}
	w.For(p.N*channels, 0, &p.layout)
	p.layout = layoutJob{}
}

func (p *Conv3x3) checkLayout(wide, nchw []float32, channels int) {
	if len(wide) < p.Len(channels) || len(nchw) < p.N*channels*p.H*p.W {
		panic(fmt.Sprintf("tensor: conv3x3 layout buffers too small: %d and %d for %d channels", len(wide), len(nchw), channels))
	}
}

// layoutJob packs channels (pack) or unpacks (image, channel) planes.
type layoutJob struct {
	p          *Conv3x3
	wide, nchw []float32
	bias, add  []float32
	channels   int
	pack       bool
}

func (j *layoutJob) Range(lo, hi int) {
	p := j.p
	hw, rp := p.H*p.W, p.RowPitch
	if j.pack {
		for c := lo; c < hi; c++ {
			ch := j.wide[c*p.ChanPitch : (c+1)*p.ChanPitch]
			clear(ch[:p.lead])
			for n := 0; n < p.N; n++ {
				img := ch[p.lead+n*p.ImagePitch : p.lead+(n+1)*p.ImagePitch]
				clear(img[:rp])
				src := j.nchw[(n*j.channels+c)*hw : (n*j.channels+c+1)*hw]
				if padRowsAsm(img[rp:], src, p.H, p.W) {
					continue
				}
				for h := 0; h < p.H; h++ {
					row := img[(h+1)*rp : (h+2)*rp]
					row[0] = 0
					copy(row[1:], src[h*p.W:(h+1)*p.W])
				}
			}
			clear(ch[p.lead+p.N*p.ImagePitch:])
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
		if j.bias == nil && unpackRowsAsm(dst, img[rp:], add, p.H, p.W) {
			continue
		}
		var bias float32
		if j.bias != nil {
			bias = j.bias[c]
		}
		for h := 0; h < p.H; h++ {
			src := img[(h+1)*rp+1 : (h+1)*rp+1+p.W]
			d := dst[h*p.W : (h+1)*p.W]
			switch {
			case j.add != nil:
				a := j.add[pl*hw+h*p.W : pl*hw+(h+1)*p.W]
				for i, v := range src {
					d[i] = v + bias + a[i]
				}
			case j.bias != nil:
				for i, v := range src {
					d[i] = v + bias
				}
			default:
				copy(d, src)
			}
		}
	}
}

// packWeights lays the weights [Out][In][3][3] out as micro-kernel panels,
// K block by K block, row panel by row panel, with K index l = (t−t0)·k + c
// for tap t of a block starting at tap t0: A[o][l] = weight[o][c][t]
// (forward) and, for the input gradient, A'[c][l] = weight[o][c][t] with o
// in place of c in l, which that product applies to the output gradient at
// the mirrored offset −tap_t.
func (p *Conv3x3) packWeights(weight []float32, forward bool) {
	mr, _ := p.arch.tile()
	rows, k, dst := p.Out, p.In, p.fwdA
	if !forward {
		rows, k, dst = p.In, p.Out, p.bwdA
	}
	panels := (rows + mr - 1) / mr
	tpb := tapBlocks(k)
	clear(dst)
	for t0 := 0; t0 < 9; t0 += tpb {
		kk := min(tpb, 9-t0) * k
		for pn := 0; pn < panels; pn++ {
			d := dst[t0*k*panels*mr+pn*kk*mr : t0*k*panels*mr+(pn+1)*kk*mr]
			for i := 0; i < min(mr, rows-pn*mr); i++ {
				r := pn*mr + i
				for l := 0; l < kk; l++ {
					t, c := t0+l/k, l%k
					if forward {
						d[l*mr+i] = weight[(r*p.In+c)*9+t]
					} else {
						d[l*mr+i] = weight[(c*p.In+r)*9+t]
					}
				}
			}
		}
	}
}

// Forward writes the convolution of x (In channels in the shift layout,
// zero padding) with weight [Out][In][3][3] into y (Out channels in the
// shift layout; its padding positions get arbitrary values).
func (p *Conv3x3) Forward(w *Workers, y, x, weight []float32) {
	p.checkProduct(y, x, weight, p.Out, p.In)
	p.packWeights(weight, true)
	p.run(w, y, x, p.fwdA, p.Out, p.In, 1)
}

// BackwardData writes dL/dx for the output gradient dy (Out channels in the
// shift layout, zero padding) into dx (In channels in the shift layout; its
// padding positions get arbitrary values).
func (p *Conv3x3) BackwardData(w *Workers, dx, dy, weight []float32) {
	p.checkProduct(dx, dy, weight, p.In, p.Out)
	p.packWeights(weight, false)
	p.run(w, dx, dy, p.bwdA, p.In, p.Out, -1)
}

// BackwardWeights writes dL/dweight [Out][In][3][3] for the output gradient
// dy and the forward input x, both in the shift layout with zero padding.
func (p *Conv3x3) BackwardWeights(w *Workers, dweight, dy, x []float32) {
	p.checkProduct(dy, x, dweight, p.Out, p.In)
	p.dot.set(p.arch, dy, p.dyRows, x, p.dwRows, p.q1-p.q0, dweight, 9*p.In, p.Out+p.In)
	p.dot.run(w)
}

func (p *Conv3x3) checkProduct(out, in, weight []float32, outC, inC int) {
	if len(out) < p.Len(outC) || len(in) < p.Len(inC) || len(weight) < p.Out*p.In*9 {
		panic(fmt.Sprintf("tensor: conv3x3 buffers too small: %d, %d and %d floats", len(out), len(in), len(weight)))
	}
}

func (p *Conv3x3) run(w *Workers, y, x, a []float32, m, k, dir int) {
	p.prod = shiftJob{p: p, y: y, x: x, a: a, m: m, k: k, dir: dir, slots: p.prod.slots}
	workers := min(w.N(), p.cols/shiftBlockCols)
	if len(p.prod.slots) < workers {
		p.prod.slots = append(p.prod.slots, make([][]float32, workers-len(p.prod.slots))...)
	}
	p.prod.next.Store(0)
	w.For(workers, 1, &p.prod)
	p.prod.y, p.prod.x, p.prod.a = nil, nil, nil
}

// shiftJob computes y[r][q] = Σ_t Σ_l A_t[r][l]·x[l][q + dir·tap_t] for blocks
// of shiftBlockCols positions q. For each tile of nr positions it packs the
// taps of a K block into one panel (an im2col of nr columns that stays in
// L1) and runs the micro-kernel once per row panel over it, so each element
// is one chain of multiply-adds per K block, blocks in order: its bits do
// not depend on which worker computed it. Range(lo, hi) runs with scratch
// slots lo..hi-1, each taking blocks until none are left.
type shiftJob struct {
	p         *Conv3x3
	y, x, a   []float32
	m, k, dir int
	next      atomic.Int64
	slots     [][]float32 // per worker: one packed B panel
}

func (j *shiftJob) Range(lo, hi int) {
	p, arch := j.p, j.p.arch
	mr, nr := arch.tile()
	cp := p.ChanPitch
	panels := (j.m + mr - 1) / mr
	tpb := tapBlocks(j.k)
	offs := p.tapBytes[0][:]
	if j.dir < 0 {
		offs = p.tapBytes[1][:]
	}
	var tile [maxMR * maxNR]float32
	for slot := lo; slot < hi; slot++ {
		if len(j.slots[slot]) < tpb*j.k*nr {
			j.slots[slot] = make([]float32, tpb*MaxConv3x3Channels*maxNR)
		}
		bp := j.slots[slot]
		for {
			blk := int(j.next.Add(1) - 1)
			if blk >= p.cols/shiftBlockCols {
				break
			}
			for q := p.q0 + blk*shiftBlockCols; q < p.q0+(blk+1)*shiftBlockCols; q += nr {
				for t0 := 0; t0 < 9; t0 += tpb {
					kk := min(tpb, 9-t0) * j.k
					packed := false
					beta := float32(1)
					if t0 == 0 {
						beta = 0
					}
					for pn := 0; pn < panels; pn++ {
						rows := min(mr, j.m-pn*mr)
						ap := j.a[t0*j.k*panels*mr+pn*kk*mr : t0*j.k*panels*mr+(pn+1)*kk*mr]
						c := j.y[pn*mr*cp+q:]
						if !p.noDirect && conv3x3Direct(arch, rows, j.k, ap, &j.x[q], offs[t0:t0+kk/j.k], cp, c, cp, beta) {
							continue
						}
						if !packed {
							// Pack the block's taps into one panel: an
							// im2col of nr columns that stays in L1.
							for t := t0; t < t0+kk/j.k; t++ {
								d := bp[(t-t0)*j.k*nr : (t-t0+1)*j.k*nr]
								src := j.x[q+j.dir*p.taps[t]:]
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
}
