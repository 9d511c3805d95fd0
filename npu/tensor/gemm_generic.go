package tensor

// gemmArch names a family of GEMM micro-kernels. Each family has its own tile
// shape, so results are bit-identical within a family (whatever the number of
// workers) but may differ in the last bits between families.
type gemmArch uint8

const (
	archGeneric gemmArch = iota // pure Go, any CPU
	archAVX2                    // 256-bit AVX2 + FMA3
	archAVX512                  // 512-bit AVX-512F
)

func (a gemmArch) String() string {
	switch a {
	case archAVX2:
		return "avx2"
	case archAVX512:
		return "avx512"
	default:
		return "generic"
	}
}

// Tile shapes (rows × columns of C per micro-kernel call). avx512MR and
// avx512NR must match the constants in internal/asmgen/gemm.go.
const (
	genericMR, genericNR = 2, 4
	avx2MR, avx2NR       = 6, 16
	avx512MR, avx512NR   = 12, 32
	maxMR, maxNR         = 12, 32 // the largest of each, for edge tiles
)

// tile returns the micro-kernel tile shape of a.
func (a gemmArch) tile() (mr, nr int) {
	switch a {
	case archAVX2:
		return avx2MR, avx2NR
	case archAVX512:
		return avx512MR, avx512NR
	default:
		return genericMR, genericNR
	}
}

// gemmKernelGeneric is the portable micro-kernel and the definition every
// assembly kernel follows, for a genericMR×genericNR tile:
//
//	for i := 0; i < mr; i++ {
//		for j := 0; j < nr; j++ {
//			var acc float32
//			for l := 0; l < k; l++ {
//				acc += a[l*mr+i] * b[l*sb+j] // one FMA chain in the assembly kernels
//			}
//			if beta == 0 {
//				c[i*ldc+j] = alpha * acc // C is not read: it may hold NaN
//			} else {
//				c[i*ldc+j] = beta*c[i*ldc+j] + alpha*acc // fused in the assembly kernels
//			}
//		}
//	}
//
// A is packed k-major (mr values per step of k); B rows are sb floats apart.
// Here the 8 sums stay in registers and each is accumulated in order of l.
func gemmKernelGeneric(k int, a, b []float32, sb int, c []float32, ldc int, alpha, beta float32) {
	const mr = genericMR
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	a = a[:k*mr]
	b = b[:(k-1)*sb+genericNR]
	for l := 0; l < k; l++ {
		ap := a[l*mr : l*mr+mr : l*mr+mr]
		bp := b[l*sb : l*sb+genericNR : l*sb+genericNR]
		a0, a1 := ap[0], ap[1]
		b0 := bp[0]
		c00 += a0 * b0
		c10 += a1 * b0
		b1 := bp[1]
		c01 += a0 * b1
		c11 += a1 * b1
		b2 := bp[2]
		c02 += a0 * b2
		c12 += a1 * b2
		b3 := bp[3]
		c03 += a0 * b3
		c13 += a1 * b3
	}
	acc := [genericMR][genericNR]float32{{c00, c01, c02, c03}, {c10, c11, c12, c13}}
	for i := range acc {
		row := c[i*ldc : i*ldc+genericNR : i*ldc+genericNR]
		for j, v := range acc[i] {
			if beta == 0 {
				row[j] = alpha * v
			} else {
				row[j] = beta*row[j] + alpha*v
			}
		}
	}
}
