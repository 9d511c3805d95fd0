//go:build !amd64 || purego

package tensor

// conv3x3Direct has no direct kernel here.
func conv3x3Direct(arch gemmArch, rows, k int, a []float32, b *float32, offs []int, sb int, c []float32, ldc int, beta float32) bool {
	return false
}

// hasConv3x3Direct reports whether conv3x3Direct has kernels for arch.
func hasConv3x3Direct(arch gemmArch) bool { return false }
