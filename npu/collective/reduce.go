package collective

// Reduction kernels. Each computes one float32 operation per element, so a
// result depends only on the order in which contributions are combined,
// which the algorithms fix (see the package documentation). Mean reduces
// with Sum and divides once at the end.

// reduceInto sets dst[i] = dst[i] op src[i]; dst holds the partial result
// of the ranks before src's.
func reduceInto(op Op, dst, src []float32) {
	src = src[:len(dst)]
	switch op {
	case Sum, Mean:
		for i := range dst {
			dst[i] += src[i]
		}
	case Prod:
		for i := range dst {
			dst[i] *= src[i]
		}
	case Max:
		for i := range dst {
			dst[i] = max(dst[i], src[i])
		}
	case Min:
		for i := range dst {
			dst[i] = min(dst[i], src[i])
		}
	}
}

// reduce3 sets dst[i] = a[i] op b[i]; dst may be a or b.
func reduce3(op Op, dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Sum, Mean:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	case Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	}
}

// finish applies the last step of op to a fully reduced segment of n ranks.
func finish(op Op, dst []float32, n int) {
	if op != Mean || n == 1 {
		return
	}
	d := float32(n)
	for i := range dst {
		dst[i] /= d
	}
}
