//go:build amd64 && !purego

package tensor

//go:noescape
func conv3x3KernelAVX512(k, taps int, a, b *float32, offs *int, sb int, c *float32, ldc int, beta float32)

//go:noescape
func conv3x3KernelAVX512Rows8(k, taps int, a, b *float32, offs *int, sb int, c *float32, ldc int, beta float32)

//go:noescape
func conv3x3KernelAVX512Rows4(k, taps int, a, b *float32, offs *int, sb int, c *float32, ldc int, beta float32)

// hasConv3x3Direct reports whether conv3x3Direct has kernels for arch.
func hasConv3x3Direct(arch gemmArch) bool { return arch == archAVX512 }

// AVX2 has no direct kernel on purpose: on Zen 3 one generated like the
// AVX-512 ones (taps read in place, 6×16 tiles) was slower than packing
// the taps for 5 of ResNet-20's 6 stride-1 products (by 7-38%, 9% faster
// for the last), as its unaligned loads split cache lines and are repeated
// for every row panel.

// conv3x3Direct runs the AVX-512 direct kernel for rows rows of a tile of C
// over the taps whose byte offsets from b's first element are offs, k
// channels sb floats apart each, and reports false when there is none (other
// families, other row counts): the caller then packs the taps and runs the
// GEMM micro-kernel, which gives the same bits. The caller guarantees that
// every row the kernel reads lies inside the slice b was taken from (the
// shift layout's margins).
func conv3x3Direct(arch gemmArch, rows, k int, a []float32, b *float32, offs []int, sb int, c []float32, ldc int, beta float32) bool {
	if arch != archAVX512 || len(offs) == 0 || k == 0 {
		return false
	}
	_ = a[len(offs)*k*avx512MR-1]
	_ = c[(rows-1)*ldc+avx512NR-1]
	switch rows {
	case avx512MR:
		conv3x3KernelAVX512(k, len(offs), &a[0], b, &offs[0], sb, &c[0], ldc, beta)
	case 8:
		conv3x3KernelAVX512Rows8(k, len(offs), &a[0], b, &offs[0], sb, &c[0], ldc, beta)
	case 4:
		conv3x3KernelAVX512Rows4(k, len(offs), &a[0], b, &offs[0], sb, &c[0], ldc, beta)
	default:
		return false
	}
	return true
}
