//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// The assembly micro-kernels (gemm_amd64.s, written by internal/asmgen) follow
// gemmKernelGeneric's definition with the FMA fused; a and b point at packed
// panels, c at the tile's top-left element.

//go:noescape
func gemmKernelAVX512(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)

//go:noescape
func gemmKernelAVX512Rows8(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)

//go:noescape
func gemmKernelAVX512Rows4(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)

//go:noescape
func gemmKernelAVX2(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)

//go:noescape
func gemmKernelAVX2Rows4(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)

//go:noescape
func gemmKernelAVX2Rows2(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)

// bestGemmArch is the fastest kernel family this CPU and OS support.
func bestGemmArch() gemmArch {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX:
		return archAVX512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return archAVX2
	default:
		return archGeneric
	}
}

// gemmArchSupported reports whether arch can run here.
func gemmArchSupported(arch gemmArch) bool {
	switch arch {
	case archAVX512:
		return cpu.X86.HasAVX512F && cpu.X86.HasAVX
	case archAVX2:
		return cpu.X86.HasAVX2 && cpu.X86.HasFMA
	default:
		return true
	}
}

// microKernel runs arch's kernel over k steps for the first rows rows of a
// full-width tile of C (rows == mr for a whole tile) and reports whether arch
// has a kernel for that many rows. The slices bound what the kernel touches;
// the checks below make an out-of-range call panic instead of corrupting
// memory.
func microKernel(arch gemmArch, rows, k int, a, b []float32, sb int, c []float32, ldc int, alpha, beta float32) bool {
	mr, nr := arch.tile()
	_ = a[k*mr-1]
	_ = b[(k-1)*sb+nr-1]
	_ = c[(rows-1)*ldc+nr-1]
	pa, pb, pc := &a[0], &b[0], &c[0]
	switch {
	case arch == archAVX512 && rows == mr:
		gemmKernelAVX512(k, pa, pb, sb, pc, ldc, alpha, beta)
	case arch == archAVX512 && rows == 8:
		gemmKernelAVX512Rows8(k, pa, pb, sb, pc, ldc, alpha, beta)
	case arch == archAVX512 && rows == 4:
		gemmKernelAVX512Rows4(k, pa, pb, sb, pc, ldc, alpha, beta)
	case arch == archAVX2 && rows == mr:
		gemmKernelAVX2(k, pa, pb, sb, pc, ldc, alpha, beta)
	case arch == archAVX2 && rows == 4:
		gemmKernelAVX2Rows4(k, pa, pb, sb, pc, ldc, alpha, beta)
	case arch == archAVX2 && rows == 2:
		gemmKernelAVX2Rows2(k, pa, pb, sb, pc, ldc, alpha, beta)
	case arch == archGeneric && rows == mr:
		gemmKernelGeneric(k, a, b, sb, c, ldc, alpha, beta)
	default:
		return false
	}
	return true
}

// Packing helpers (gemm_amd64.s): plain moves, no wider than AVX.

//go:noescape
func gemmPackCopy32(dst *float32, src *float32, ld int, rows int)

//go:noescape
func gemmPackCopy16(dst *float32, src *float32, ld int, rows int)

//go:noescape
func gemmPackCopy12(dst *float32, src *float32, ld int, rows int)

//go:noescape
func gemmPackCopy6(dst *float32, src *float32, ld int, rows int)

//go:noescape
func gemmPackTrans(dst *float32, src *float32, ld int, k int, w int)

// packCopy copies rows rows of width floats, ld apart in src, to consecutive
// rows of dst; it reports false when it has no fast path for the width.
func packCopy(arch gemmArch, dst, src []float32, ld, rows, width int) bool {
	if arch == archGeneric || rows == 0 {
		return false
	}
	_ = dst[rows*width-1]
	_ = src[(rows-1)*ld+width-1]
	switch width {
	case 32:
		gemmPackCopy32(&dst[0], &src[0], ld, rows)
	case 16:
		gemmPackCopy16(&dst[0], &src[0], ld, rows)
	case 12:
		gemmPackCopy12(&dst[0], &src[0], ld, rows)
	case 6:
		gemmPackCopy6(&dst[0], &src[0], ld, rows)
	default:
		return false
	}
	return true
}

// packTrans sets dst[l*w+i] = src[i*ld+l] for i < w, l < k; it reports
// false when it has no fast path.
func packTrans(arch gemmArch, dst, src []float32, ld, k, w int) bool {
	if arch == archGeneric || k == 0 || w == 0 {
		return false
	}
	_ = dst[k*w-1]
	_ = src[(w-1)*ld+k-1]
	gemmPackTrans(&dst[0], &src[0], ld, k, w)
	return true
}
