package job

import "syscall"

// peakHostMemory returns the most resident memory this process has held
// (bytes; the kernel's high-water mark, ru_maxrss), or 0 when unknown.
func peakHostMemory() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss << 10 // KiB on Linux
}
