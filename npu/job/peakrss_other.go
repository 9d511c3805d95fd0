//go:build !linux

package job

// peakHostMemory is not measured here (ru_maxrss's unit differs between
// systems): 0, which result.json leaves out.
func peakHostMemory() int64 { return 0 }
