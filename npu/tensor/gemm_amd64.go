//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// The assembly micro-kernels (gemm_amd64.s, written by gemm_gen.go) follow
// gemmKernelGeneric's definition with the FMA fused; a and b point at packed
// panels, c at the tile's top-left element.

//go:noescape
func gemmKernelAVX512(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)

//go:noescape
func gemmKernelAVX2(k int, a *float32, b *float32, sb int, c *float32, ldc int, alpha, beta float32)

// bestGemmArch is the fastest kernel family this CPU and OS support.
func bestGemmArch() gemmArch {
	switch {
	case cpu.X86.HasAVX512F:
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
		return cpu.X86.HasAVX512F
	case archAVX2:
		return cpu.X86.HasAVX2 && cpu.X86.HasFMA
	default:
		return true
	}
}

// microKernel runs arch's kernel over k steps for one full tile of C.
// The slices bound what the kernel touches; the checks below make an
// out-of-range call panic instead of corrupting memory.
func microKernel(arch gemmArch, k int, a, b []float32, sb int, c []float32, ldc int, alpha, beta float32) {
	mr, nr := arch.tile()
	_ = a[k*mr-1]
	_ = b[(k-1)*sb+nr-1]
	_ = c[(mr-1)*ldc+nr-1]
	switch arch {
	case archAVX512:
		gemmKernelAVX512(k, &a[0], &b[0], sb, &c[0], ldc, alpha, beta)
	case archAVX2:
		gemmKernelAVX2(k, &a[0], &b[0], sb, &c[0], ldc, alpha, beta)
	default:
		gemmKernelGeneric(k, a, b, sb, c, ldc, alpha, beta)
	}
}
