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
			// op(A)ᵀ is stored: each step of k is mr contiguous floats.
			for l := 0; l < kk; l++ {
				src := a[(l0+l)*lda+ic+p0:]
				dl := d[l*mr : l*mr+mr]
				copy(dl, src[:rows])
				clear(dl[rows:])
			}
			continue
		}
		for i := 0; i < rows; i++ {
			src := a[(ic+p0+i)*lda+l0:]
			src = src[:kk]
			for l, v := range src {
				d[l*mr+i] = v
			}
		}
		for i := rows; i < mr; i++ {
			for l := 0; l < kk; l++ {
				d[l*mr+i] = 0
			}
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
			for l := 0; l < kk; l++ {
				src := b[(l0+l)*ldb+jc+q0:]
				dl := d[l*nr : l*nr+nr]
				copy(dl, src[:cols])
				clear(dl[cols:])
			}
			continue
		}
		for c := 0; c < cols; c++ {
			src := b[(jc+q0+c)*ldb+l0:]
			src = src[:kk]
			for l, v := range src {
				d[l*nr+c] = v
			}
		}
		for c := cols; c < nr; c++ {
			for l := 0; l < kk; l++ {
				d[l*nr+c] = 0
			}
		}
	}
}
