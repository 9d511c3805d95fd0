package tensor

import "fmt"

// The dot-product ("NT") kernels compute C = A·Bᵀ where the rows of A and B
// are long and contiguous, as in a convolution's weight gradient: the
// gradient of the output and the input columns both run along the pixels.
// The packed GEMM would have to transpose both; here a tile of ta rows of A
// and tb rows of B is streamed together, each pair (i, j) accumulating in a
// vector of lanes partial sums, lane q%lanes taking element q. Once all of K
// is done the lanes are added up (see dotJob.reduce) and the last k%lanes
// products added in float64, so every element of C is the same sequence of
// operations whoever computes it.
const (
	dotGroupTiles = 16      // most tiles one work item covers (its accumulators stay in L1)
	dotReducePad  = 8 * 16  // floats past an item's accumulators that dotReduce may read
	dotMinItems   = 32      // fewer tiles per item until there are this many items, for balance
	dotBlockBytes = 1 << 20 // K is streamed in blocks whose rows fit in this many bytes (Zen 5's L2; measured best)
	// dotBlockBytesAVX2 is dotBlockBytes for the AVX2 kernel: on Zen 3
	// (512 KiB of L2) blocks of 1 MiB and less were slower than 2-64 MiB,
	// which were alike (ResNet-20's weight gradients 4-6% faster than at
	// 1 MiB): fewer, longer kernel calls win over keeping rows in L2.
	dotBlockBytesAVX2 = 4 << 20
)

// dotTile returns the tile shape and lane count of arch's dot kernel.
func dotTile(arch gemmArch) (ta, tb, lanes int) {
	switch arch {
	case archAVX512:
		return 4, 6, 16
	case archAVX2:
		return 3, 4, 8
	default:
		return 2, 4, 1
	}
}

// dotKernelGeneric is the portable dot kernel and the definition of the
// assembly ones: for i < ta, j < tb and q < k (a multiple of lanes),
//
//	acc[(i*tb+j)*lanes + q%lanes] += a[i][q] · b[j][q]
//
// in order of q, fused in the assembly kernels.
func dotKernelGeneric(k int, a *[4][]float32, b *[6][]float32, acc []float32) {
	a0, a1 := a[0][:k], a[1][:k]
	b0, b1, b2, b3 := b[0][:k], b[1][:k], b[2][:k], b[3][:k]
	acc = acc[:8]
	c00, c01, c02, c03 := acc[0], acc[1], acc[2], acc[3]
	c10, c11, c12, c13 := acc[4], acc[5], acc[6], acc[7]
	for q, x0 := range a0 {
		x1 := a1[q]
		y0, y1, y2, y3 := b0[q], b1[q], b2[q], b3[q]
		c00 += x0 * y0
		c01 += x0 * y1
		c02 += x0 * y2
		c03 += x0 * y3
		c10 += x1 * y0
		c11 += x1 * y1
		c12 += x1 * y2
		c13 += x1 * y3
	}
	acc[0], acc[1], acc[2], acc[3] = c00, c01, c02, c03
	acc[4], acc[5], acc[6], acc[7] = c10, c11, c12, c13
}

// dotJob is one product c[i·ldc+j] = Σ_{q<k} a[aOff[i]+q]·b[bOff[j]+q],
// i < len(aOff), j < len(bOff), cut into items of group tiles.
// rangeSlot(slot, lo, hi) runs items lo..hi-1 with the accumulators of slot.
type dotJob struct {
	arch       gemmArch
	a, b, c    []float32
	aOff, bOff []int
	k, ldc     int
	block      int // K block length, a multiple of every lane count

	tilesB, tiles, items int
	group                int
	slots                [][]float32 // per worker: the accumulators of one item
}

// set prepares the product; memRows is how many distinct rows of length k
// the product reads (it sets the K block so they stay in cache).
func (j *dotJob) set(arch gemmArch, a []float32, aOff []int, b []float32, bOff []int, k int, c []float32, ldc, memRows int) {
	m, n := len(aOff), len(bOff)
	if m > 0 && n > 0 && (ldc < n || len(c) < (m-1)*ldc+n) {
		panic(fmt.Sprintf("tensor: dot product C has %d elements (ld %d), want %d×%d", len(c), ldc, m, n))
	}
	for _, o := range aOff {
		if o < 0 || o+k > len(a) {
			panic(fmt.Sprintf("tensor: dot product row at %d of length %d outside A (%d)", o, k, len(a)))
		}
	}
	for _, o := range bOff {
		if o < 0 || o+k > len(b) {
			panic(fmt.Sprintf("tensor: dot product row at %d of length %d outside B (%d)", o, k, len(b)))
		}
	}
	j.arch, j.a, j.b, j.c, j.aOff, j.bOff, j.k, j.ldc = arch, a, b, c, aOff, bOff, k, ldc
	ta, tb, _ := dotTile(arch)
	blockBytes := dotBlockBytes
	if arch == archAVX2 {
		blockBytes = dotBlockBytesAVX2
	}
	j.block = max(256, blockBytes/4/max(1, memRows)/64*64)
	j.tilesB = (n + tb - 1) / tb
	j.tiles = (m + ta - 1) / ta * j.tilesB
	j.group = max(1, min(dotGroupTiles, j.tiles/dotMinItems))
	j.items = (j.tiles + j.group - 1) / j.group
}

// run computes the product on w's goroutines and drops the operands.
func (j *dotJob) run(w *Workers) {
	if len(j.aOff) > 0 && len(j.bOff) > 0 {
		if p := w.N(); len(j.slots) < p {
			j.slots = append(j.slots, make([][]float32, p-len(j.slots))...)
		}
		// Every worker's accumulators are made here, by the owner: which
		// workers take part depends on timing, and a worker joining late
		// would otherwise allocate in a steady-state step.
		ta, tb, lanes := dotTile(j.arch)
		need := dotGroupTiles*ta*tb*lanes + dotReducePad
		for i, acc := range j.slots {
			if len(acc) < need {
				j.slots[i] = make([]float32, need)
			}
		}
		w.forSlots(j.items, 1, j)
	}
	j.a, j.b, j.c, j.aOff, j.bOff = nil, nil, nil, nil, nil
}

func (j *dotJob) rangeSlot(slot, lo, hi int) {
	ta, tb, lanes := dotTile(j.arch)
	per := ta * tb * lanes
	acc := j.slots[slot] // made by run for every slot
	for it := lo; it < hi; it++ {
		t0, t1 := it*j.group, min((it+1)*j.group, j.tiles)
		clear(acc[:(t1-t0)*per])
		whole := j.k / lanes * lanes
		for q0 := 0; q0 < whole; q0 += j.block {
			kk := min(j.block, whole-q0)
			for t := t0; t < t1; t++ {
				var ar [4][]float32
				var br [6][]float32
				j.rows(&ar, &br, t, q0, kk)
				dotKernel(j.arch, kk, &ar, &br, acc[(t-t0)*per:(t-t0+1)*per])
			}
		}
		for t := t0; t < t1; t++ {
			j.reduce(t, acc[(t-t0)*per:], whole)
		}
	}
}

// rows points ar and br at columns q0..q0+kk-1 of tile t's rows; rows past
// the edge of A or B repeat the last one (their sums are dropped).
func (j *dotJob) rows(ar *[4][]float32, br *[6][]float32, t, q0, kk int) {
	ta, tb, _ := dotTile(j.arch)
	i0, j0 := t/j.tilesB*ta, t%j.tilesB*tb
	for i := 0; i < ta; i++ {
		o := j.aOff[min(i0+i, len(j.aOff)-1)] + q0
		ar[i] = j.a[o : o+kk]
	}
	for i := 0; i < tb; i++ {
		o := j.bOff[min(j0+i, len(j.bOff)-1)] + q0
		br[i] = j.b[o : o+kk]
	}
}

// reduce writes tile t's elements of C: the lanes (in order in float64, or
// as a tree in float32 by the AVX-512 reduction), then the products past
// the last whole vector, summed in float64.
func (j *dotJob) reduce(t int, acc []float32, whole int) {
	ta, tb, lanes := dotTile(j.arch)
	i0, j0 := t/j.tilesB*ta, t%j.tilesB*tb
	var sums [32]float32
	fast := dotReduce(j.arch, acc, &sums)
	for i := 0; i < ta && i0+i < len(j.aOff); i++ {
		a := j.a[j.aOff[i0+i]+whole : j.aOff[i0+i]+j.k]
		for jj := 0; jj < tb && j0+jj < len(j.bOff); jj++ {
			var s float64
			if fast {
				s = float64(sums[i*tb+jj])
			} else {
				for _, v := range acc[(i*tb+jj)*lanes : (i*tb+jj+1)*lanes] {
					s += float64(v)
				}
			}
			b := j.b[j.bOff[j0+jj]+whole : j.bOff[j0+jj]+j.k]
			for q, v := range a {
				s += float64(v) * float64(b[q])
			}
			j.c[(i0+i)*j.ldc+j0+jj] = float32(s)
		}
	}
}

// GemmNT writes C = A·Bᵀ for A m×k and B n×k, row-major with leading
// dimensions lda and ldb, into C (m×n, leading dimension ldc), using the
// dot-product kernels: the fast way when k is long and m, n are small, as in
// a weight gradient. rowOffsets holds at least m+n ints of scratch the
// caller keeps (nil allocates), and a nil pool allocates its accumulators
// per call: a training step passes both. The result is bit-identical for
// every pool size.
func (w *Workers) GemmNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, rowOffsets []int) {
	if m < 0 || n < 0 || k < 0 || (m > 1 && lda < k) || (n > 1 && ldb < k) {
		panic(fmt.Sprintf("tensor: GemmNT with m=%d n=%d k=%d lda=%d ldb=%d", m, n, k, lda, ldb))
	}
	if len(rowOffsets) < m+n {
		rowOffsets = make([]int, m+n)
	}
	aOff, bOff := rowOffsets[:m], rowOffsets[m:m+n]
	for i := range aOff {
		aOff[i] = i * lda
	}
	for i := range bOff {
		bOff[i] = i * ldb
	}
	var j *dotJob
	if w != nil {
		j = &w.dot
	} else {
		j = new(dotJob)
	}
	j.set(bestGemmArch(), a, aOff, b, bOff, k, c, ldc, m+n)
	j.run(w)
}
