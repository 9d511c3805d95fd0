package shard

// copyBox copies a box of extent shape from src (a row-major array of
// shape srcShape, box starting at srcOff) into dst (shape dstShape, box at
// dstOff). All slices have one entry per dimension; the caller guarantees
// the boxes lie inside both arrays. A scalar (no dimensions) is one value.
func copyBox(dst []float32, dstShape, dstOff []int, src []float32, srcShape, srcOff []int, shape []int) {
	dims := len(shape)
	if dims == 0 {
		dst[0] = src[0]
		return
	}
	for _, s := range shape {
		if s == 0 {
			return
		}
	}
	row := shape[dims-1]
	dstStride, srcStride := strides(dstShape), strides(srcShape)
	idx := make([]int, dims-1) // position within the box, all axes but the last
	for {
		d, s := dstOff[dims-1], srcOff[dims-1]
		for k, i := range idx {
			d += (dstOff[k] + i) * dstStride[k]
			s += (srcOff[k] + i) * srcStride[k]
		}
		copy(dst[d:d+row], src[s:s+row])
		k := dims - 2
		for ; k >= 0; k-- {
			if idx[k]++; idx[k] < shape[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return
		}
	}
}

// strides returns the row-major element strides of shape.
func strides(shape []int) []int {
	out := make([]int, len(shape))
	n := 1
	for k := len(shape) - 1; k >= 0; k-- {
		out[k] = n
		n *= shape[k]
	}
	return out
}

// volume returns the number of elements of shape.
func volume(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// zeros returns a slice of n zeros, for offsets at the origin.
func zeros(n int) []int { return make([]int, n) }

// sub returns a − b element-wise.
func sub(a, b []int) []int {
	out := make([]int, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}
