package parallel

// CopyBox copies a box of extent shape from src (a row-major array of
// shape srcShape, the box starting at srcOff) into dst (shape dstShape, the
// box at dstOff). Shapes and offsets have one entry per dimension; a nil
// offset is the origin. The caller guarantees the boxes lie inside both
// arrays. A scalar (no dimensions) is one value. It allocates nothing: it
// runs in every redistribution of every step.
func CopyBox(dst []float32, dstShape, dstOff []int, src []float32, srcShape, srcOff []int, shape []int) {
	dims := len(shape)
	if dims == 0 {
		dst[0] = src[0]
		return
	}
	at := func(off []int, k int) int {
		if off == nil {
			return 0
		}
		return off[k]
	}
	last := dims - 1
	n := shape[last]
	rows := 1
	for _, s := range shape[:last] {
		rows *= s
	}
	if n == 0 {
		return
	}
	for r := range rows {
		d, s := at(dstOff, last), at(srcOff, last)
		dStride, sStride := dstShape[last], srcShape[last]
		rem := r
		for k := last - 1; k >= 0; k-- {
			i := rem % shape[k]
			rem /= shape[k]
			d += (at(dstOff, k) + i) * dStride
			s += (at(srcOff, k) + i) * sStride
			dStride *= dstShape[k]
			sStride *= srcShape[k]
		}
		copy(dst[d:d+n], src[s:s+n])
	}
}
