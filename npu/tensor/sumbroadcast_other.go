//go:build !amd64 || purego

package tensor

// useSumAsm reports false: this build has no SumBroadcast kernel.
func useSumAsm() bool { return false }

// sumBroadcastAsm leaves everything to Go.
func sumBroadcastAsm(dsts, srcs [][]float32, divisor float32) int { return 0 }
