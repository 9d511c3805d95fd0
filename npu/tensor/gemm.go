package tensor

import "fmt"

// Blocking of the packed GEMM, sized for one Zen 5 core (48 KiB L1D, 1 MiB
// L2): an mr×gemmKC micro-panel of packed A stays in L1 while the kernel
// streams gemmKC×nr micro-panels of a packed B block (gemmKC×gemmNC, 512 KiB)
// from L2; the packed A block (gemmMC×gemmKC, 240 KiB) shares L2 with it.
//
// Only gemmKC changes results: every element of C is one FMA chain per K
// block plus one update of C per block, so the rows and columns a worker
// covers, and the A and B block sizes, leave the bits alone.
const (
	gemmKC = 256 // K is consumed in nearly equal blocks of at most this size, in order
	gemmMC = 240 // rows of a packed A block; a multiple of every kernel's mr
	gemmNC = 512 // columns of a packed B block; a multiple of every kernel's nr

	// The nil *Workers path packs into scratch on the goroutine's stack,
	// which the compiler keeps under 128 KiB: smaller A and B blocks.
	stackMC = 48
	stackNC = 64

	// directBRows is the most rows of C for which the kernel reads a plain
	// B in place instead of packing it (see gemmJob.item).
	directBRows = 48

	// parallelFlops is the size (2·m·n·k) below which a product runs on the
	// calling goroutine: waking a worker costs more than it saves.
	parallelFlops = 1 << 23
	// itemsPerWorker is how many pieces of C a parallel product is cut into
	// per worker, so a core slowed by other load does not hold up the rest.
	itemsPerWorker = 2
)

// Gemm computes C = alpha·op(A)·op(B) + beta·C on the calling goroutine.
// Storage is row-major: op(A) is m×k (A is k×m with leading dimension lda when
// transA), op(B) is k×n, C is m×n with leading dimension ldc. beta == 0
// overwrites C whatever it held. Lengths are the caller's invariant: a short
// slice panics.
func Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	var w *Workers
	w.runGemm(bestGemmArch(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Gemm is the package-level Gemm spread over the workers. Its result is
// bit-identical to the package-level Gemm for every pool size.
func (w *Workers) Gemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	w.runGemm(bestGemmArch(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// runGemm is Gemm with the kernel family chosen by the caller, so tests can run
// every family this CPU supports.
func (w *Workers) runGemm(arch gemmArch, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleRows(m, n, beta, c, ldc)
		return
	}
	if w == nil {
		var buf [stackMC*gemmKC + gemmKC*stackNC]float32
		s := gemmScratch{a: buf[:stackMC*gemmKC], b: buf[stackMC*gemmKC:], mc: stackMC, nc: stackNC}
		var j gemmJob
		j.set(arch, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		j.item(&s, 0, m, 0, n)
		return
	}
	p := w.N()
	j := &w.gemm
	j.set(arch, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	mr, nr := arch.tile()
	j.itemM, j.itemN = gemmItems(m, n, k, p, mr, nr)
	j.itemsN = (n + j.itemN - 1) / j.itemN
	j.items = (m + j.itemM - 1) / j.itemM * j.itemsN
	if len(j.slots) < p {
		j.slots = make([]gemmScratch, p)
	}
	w.forSlots(j.items, 1, j)
	j.a, j.b, j.c = nil, nil, nil
}

func checkGemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("tensor: gemm with negative size m=%d n=%d k=%d", m, n, k))
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if lda < max(1, ac) || ldb < max(1, bc) || ldc < max(1, n) {
		panic(fmt.Sprintf("tensor: gemm leading dimensions lda=%d ldb=%d ldc=%d too small for %d×%d, %d×%d, %d×%d",
			lda, ldb, ldc, ar, ac, br, bc, m, n))
	}
	if ar > 0 && ac > 0 && len(a) < (ar-1)*lda+ac {
		panic(fmt.Sprintf("tensor: gemm A has %d elements, want %d", len(a), (ar-1)*lda+ac))
	}
	if br > 0 && bc > 0 && len(b) < (br-1)*ldb+bc {
		panic(fmt.Sprintf("tensor: gemm B has %d elements, want %d", len(b), (br-1)*ldb+bc))
	}
	if m > 0 && n > 0 && len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("tensor: gemm C has %d elements, want %d", len(c), (m-1)*ldc+n))
	}
}

func scaleRows(m, n int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// gemmItems cuts C into pieces of itemM rows × itemN columns for p workers.
// Whole rows are preferred: a piece packs its rows of A once and only B is
// packed again per piece (a plain copy, where A is a transpose).
func gemmItems(m, n, k, p, mr, nr int) (itemM, itemN int) {
	if p <= 1 || 2*m*n*k < parallelFlops {
		return m, n
	}
	want := itemsPerWorker * p
	if rows := roundUp((m+want-1)/want, mr); rows >= 4*mr {
		return rows, n
	}
	if cols := roundUp((n+want-1)/want, nr); cols >= 2*nr {
		return m, cols
	}
	// Small on both sides: as many pieces as there are micro-tiles, up to want.
	rows := roundUp((m+p-1)/p, mr)
	return rows, roundUp((n+want-1)/want, nr)
}

func roundUp(x, to int) int { return (x + to - 1) / to * to }

// gemmScratch holds one worker's packed blocks and an edge tile. Workers
// keep one per goroutine for their lifetime; the nil *Workers path builds
// one on its stack.
type gemmScratch struct {
	a, b   []float32 // packed A (mc×kc, mr-row panels) and B (kc×nc, nr-column panels)
	mc, nc int
	tile   [maxMR * maxNR]float32 // a partial tile of C goes through here
}

// gemmJob is one GEMM cut into items of C. rangeSlot(slot, lo, hi) runs
// items lo..hi-1 with the scratch of slot; an item covers all of K, so its
// bits do not depend on who ran it.
type gemmJob struct {
	arch           gemmArch
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32
	lda, ldb, ldc  int

	itemM, itemN, itemsN, items int
	slots                       []gemmScratch
}

func (j *gemmJob) set(arch gemmArch, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	j.arch, j.transA, j.transB = arch, transA, transB
	j.m, j.n, j.k = m, n, k
	j.alpha, j.beta = alpha, beta
	j.a, j.b, j.c = a, b, c
	j.lda, j.ldb, j.ldc = lda, ldb, ldc
}

func (j *gemmJob) rangeSlot(slot, lo, hi int) {
	s := &j.slots[slot]
	if s.a == nil {
		s.a, s.b = make([]float32, gemmMC*gemmKC), make([]float32, gemmKC*gemmNC)
		s.mc, s.nc = gemmMC, gemmNC
	}
	for q := lo; q < hi; q++ {
		i0, j0 := q/j.itemsN*j.itemM, q%j.itemsN*j.itemN
		j.item(s, i0, min(i0+j.itemM, j.m), j0, min(j0+j.itemN, j.n))
	}
}

// item computes rows i0..i1-1 and columns j0..j1-1 of C over all of K.
func (j *gemmJob) item(s *gemmScratch, i0, i1, j0, j1 int) {
	_, nr := j.arch.tile()
	kc := (j.k + (j.k+gemmKC-1)/gemmKC - 1) / ((j.k + gemmKC - 1) / gemmKC) // nearly equal blocks
	for l0 := 0; l0 < j.k; l0 += kc {
		kk := min(kc, j.k-l0)
		beta := j.beta
		if l0 > 0 {
			beta = 1
		}
		for ic := i0; ic < i1; ic += s.mc {
			mm := min(s.mc, i1-ic)
			j.packA(s.a, ic, mm, l0, kk)
			// With few rows a packed B panel is used too few times to pay
			// for its copy: the kernel then reads whole panels of a plain
			// B in place, and only a partial last panel is packed.
			direct := !j.transB && mm <= directBRows
			for jc := j0; jc < j1; jc += s.nc {
				nn := min(s.nc, j1-jc)
				if direct {
					if whole := nn / nr * nr; whole < nn {
						j.packB(s.b, l0, kk, jc+whole, nn-whole)
					}
				} else {
					j.packB(s.b, l0, kk, jc, nn)
				}
				j.block(s, ic, mm, jc, nn, l0, kk, beta, direct)
			}
		}
	}
}

// block runs the micro-kernel over an mm×nn block of C at (ic, jc) from the
// packed A and B blocks; with direct, whole B panels come from op(B) itself
// (rows l0.., not transposed) and only a partial last one from s.b. A short
// panel at the bottom goes to a kernel for that many rows when the family
// has one; any other partial tile is computed in s.tile by the full kernel
// and copied out. Every kernel does the same arithmetic per element, so C's
// bits do not depend on where a block or tile boundary falls.
func (j *gemmJob) block(s *gemmScratch, ic, mm, jc, nn, l0, kk int, beta float32, direct bool) {
	mr, nr := j.arch.tile()
	ldc := j.ldc
	for ir := 0; ir < mm; ir += mr {
		ap := s.a[ir*kk : (ir+mr)*kk]
		rows := min(mr, mm-ir)
		for jr := 0; jr < nn; jr += nr {
			cols := min(nr, nn-jr)
			bp, sb := s.b[jr*kk:(jr+nr)*kk], nr
			if direct {
				bp, sb = j.b[l0*j.ldb+jc+jr:], j.ldb
				if cols < nr {
					bp, sb = s.b[:nr*kk], nr
				}
			}
			c := j.c[(ic+ir)*ldc+jc+jr:]
			if cols == nr && microKernel(j.arch, rows, kk, ap, bp, sb, c, ldc, j.alpha, beta) {
				continue
			}
			t := s.tile[:mr*nr]
			if beta != 0 {
				for r := 0; r < rows; r++ {
					copy(t[r*nr:r*nr+cols], c[r*ldc:r*ldc+cols])
				}
			}
			microKernel(j.arch, mr, kk, ap, bp, sb, t, nr, j.alpha, beta)
			for r := 0; r < rows; r++ {
				copy(c[r*ldc:r*ldc+cols], t[r*nr:r*nr+cols])
			}
		}
	}
}
