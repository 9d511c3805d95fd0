package shard

// volume returns the number of elements of shape.
func volume(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// sub returns a − b element-wise.
func sub(a, b []int) []int {
	out := make([]int, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}
