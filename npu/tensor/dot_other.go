//go:build !amd64 || purego

package tensor

// dotKernel runs the portable dot kernel.
func dotKernel(arch gemmArch, k int, a *[4][]float32, b *[6][]float32, acc []float32) {
	if k > 0 {
		dotKernelGeneric(k, a, b, acc)
	}
}

// dotReduce has no fast path here.
func dotReduce(arch gemmArch, acc []float32, sums *[32]float32) bool { return false }
