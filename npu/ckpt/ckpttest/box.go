package ckpttest

import "slices"

// BoxBytes returns the row-major bytes of the box at offset with extent
// shape of a whole tensor (data, of dims, elem bytes an element), element
// by element: a reference for the tests of the engines that cut and
// reassemble tensors, independent of them. A scalar is its bytes; an empty
// box none. (Plain arguments, not a ckpt.Tensor: npu/ckpt's own tests
// import this package.)
func BoxBytes(data []byte, whole []int64, elem int, offset, shape []int) []byte {
	dims := make([]int, len(whole))
	for i, d := range whole {
		dims[i] = int(d)
	}
	if len(dims) == 0 {
		return slices.Clone(data)
	}
	var out []byte
	for _, d := range shape {
		if d == 0 {
			return out
		}
	}
	idx := make([]int, len(dims))
	for {
		lin := 0
		for d := range dims {
			lin = lin*dims[d] + offset[d] + idx[d]
		}
		out = append(out, data[lin*elem:(lin+1)*elem]...)
		d := len(dims) - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return out
		}
	}
}
