//go:build !amd64 || purego

package tensor

// bestGemmArch is the fastest kernel family this build has: only the
// portable one outside amd64 (or with the purego tag).
func bestGemmArch() gemmArch { return archGeneric }

// gemmArchSupported reports whether arch can run here.
func gemmArchSupported(arch gemmArch) bool { return arch == archGeneric }

// microKernel runs the portable kernel over k steps for one full tile of C.
func microKernel(arch gemmArch, k int, a, b []float32, sb int, c []float32, ldc int, alpha, beta float32) {
	gemmKernelGeneric(k, a, b, sb, c, ldc, alpha, beta)
}
