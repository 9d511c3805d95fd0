//go:build !amd64 || purego

package tensor

// bestGemmArch is the fastest kernel family this build has: only the
// portable one outside amd64 (or with the purego tag).
func bestGemmArch() gemmArch { return archGeneric }

// gemmArchSupported reports whether arch can run here.
func gemmArchSupported(arch gemmArch) bool { return arch == archGeneric }

// microKernel runs the portable kernel over k steps for a whole tile of C
// (rows == genericMR) and reports whether it ran.
func microKernel(arch gemmArch, rows, k int, a, b []float32, sb int, c []float32, ldc int, alpha, beta float32) bool {
	if rows != genericMR {
		return false
	}
	gemmKernelGeneric(k, a, b, sb, c, ldc, alpha, beta)
	return true
}

// packCopy has no fast path here.
func packCopy(arch gemmArch, dst, src []float32, ld, rows, width int) bool { return false }

// packTrans has no fast path here.
func packTrans(arch gemmArch, dst, src []float32, ld, k, w int) bool { return false }
