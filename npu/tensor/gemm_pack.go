package tensor

// packA copies rows ic..ic+mm-1, columns l0..l0+kk-1 of op(A) into dst as
// panels of mr rows, each stored k-major (mr values per step of k) and padded
// with zero rows to a whole panel.
func (j *gemmJob) packA(dst []float32, ic, mm, l0, kk int) {
	mr, _ := j.arch.tile()
	a, lda := j.a, j.lda
	for p0 := 0; p0 < mm; p0 += mr {
		d := dst[p0*kk : (p0+mr)*kk]
		rows := min(mr, mm-p0)
		if j.transA {
			// Aᵀ is stored: a step of k is rows contiguous floats.
			src := a[l0*lda+ic+p0:]
			if rows < mr || !packCopy(j.arch, d, src, lda, kk, mr) {
				packCopyGo(d, src, lda, kk, mr, rows)
			}
			continue
		}
		src := a[(ic+p0)*lda+l0:]
		if rows < mr || !packTrans(j.arch, d, src, lda, kk, mr) {
			packTransGo(d, src, lda, kk, mr, rows)
		}
	}
}

// packB copies rows l0..l0+kk-1, columns jc..jc+nn-1 of op(B) into dst as
// panels of nr columns, each stored k-major (nr values per step of k) and
// padded with zero columns to a whole panel.
func (j *gemmJob) packB(dst []float32, l0, kk, jc, nn int) {
	_, nr := j.arch.tile()
	b, ldb := j.b, j.ldb
	for q0 := 0; q0 < nn; q0 += nr {
		d := dst[q0*kk : (q0+nr)*kk]
		cols := min(nr, nn-q0)
		if !j.transB {
			src := b[l0*ldb+jc+q0:]
			if cols < nr || !packCopy(j.arch, d, src, ldb, kk, nr) {
				packCopyGo(d, src, ldb, kk, nr, cols)
			}
			continue
		}
		// Bᵀ is stored: column j of op(B) is a row of b.
		src := b[(jc+q0)*ldb+l0:]
		if cols < nr || !packTrans(j.arch, d, src, ldb, kk, nr) {
			packTransGo(d, src, ldb, kk, nr, cols)
		}
	}
}

// packCopyGo copies rows rows of n floats, ld apart in src, into rows of
// width floats in dst, zero-filling each to width. packCopy is its fast path
// for n == width.
func packCopyGo(dst, src []float32, ld, rows, width, n int) {
	for r := 0; r < rows; r++ {
		d := dst[r*width : r*width+width]
		copy(d, src[r*ld:r*ld+n])
		clear(d[n:])
	}
}

// packTransGo sets dst[l*w+i] = src[i*ld+l] for i < n, l < k, and zero for
// n <= i < w. packTrans is its fast path for n == w.
func packTransGo(dst, src []float32, ld, k, w, n int) {
	dst = dst[:k*w]
	for i := 0; i < n; i++ {
		for l, v := range src[i*ld : i*ld+k] {
			dst[l*w+i] = v
		}
	}
	for i := n; i < w; i++ {
		for l := 0; l < k; l++ {
			dst[l*w+i] = 0
		}
	}
}
