//go:build amd64 && !purego

package tensor

// The assembly dot kernels (dot_amd64.s) follow dotKernelGeneric's
// definition for their tile shapes (see dotTile): a holds ta row pointers,
// b holds tb, each row k floats (k a multiple of the lane count), and acc
// holds ta·tb vectors of partial sums, loaded at the start and stored back.

//go:noescape
func dotKernelAVX512x6(k int, a0, a1, a2, a3, b0, b1, b2, b3, b4, b5 *float32, acc *float32)

//go:noescape
func dotKernelAVX2(k int, a0, a1, a2, b0, b1, b2, b3 *float32, acc *float32)

//go:noescape
func dotReduceAVX512(acc *float32, sums *float32)

// dotReduce adds the lanes of each of the ta·tb vectors in acc into sums
// and reports whether arch has a fast path (else the caller sums them).
// It reads 32 vectors, so acc must extend dotReducePad floats past the
// 24 of an AVX-512 tile; each vector is summed by the same tree.
func dotReduce(arch gemmArch, acc []float32, sums *[32]float32) bool {
	if arch != archAVX512 {
		return false
	}
	_ = acc[32*16-1]
	dotReduceAVX512(&acc[0], &sums[0])
	dotReduceAVX512(&acc[16*16], &sums[16])
	return true
}

// dotKernel runs arch's dot kernel over k columns of the rows in a and b.
func dotKernel(arch gemmArch, k int, a *[4][]float32, b *[6][]float32, acc []float32) {
	ta, tb, lanes := dotTile(arch)
	if k == 0 {
		return
	}
	if k%lanes != 0 {
		panic("tensor: dot kernel length not a multiple of the lanes")
	}
	_ = acc[ta*tb*lanes-1]
	for i := 0; i < ta; i++ {
		_ = a[i][k-1]
	}
	for i := 0; i < tb; i++ {
		_ = b[i][k-1]
	}
	switch arch {
	case archAVX512:
		dotKernelAVX512x6(k, &a[0][0], &a[1][0], &a[2][0], &a[3][0], &b[0][0], &b[1][0], &b[2][0], &b[3][0], &b[4][0], &b[5][0], &acc[0])
	case archAVX2:
		dotKernelAVX2(k, &a[0][0], &a[1][0], &a[2][0], &b[0][0], &b[1][0], &b[2][0], &b[3][0], &acc[0])
	default:
		dotKernelGeneric(k, a, b, acc)
	}
}
