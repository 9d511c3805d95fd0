package job

import (
	"syscall"
	"time"
)

// processUsage returns the most resident memory this process has held
// (bytes; the kernel's high-water mark, ru_maxrss) and the CPU time it has
// used (user and system), or zeros when unknown.
func processUsage() (peakRSS int64, cpu time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return ru.Maxrss << 10, time.Duration(ru.Utime.Nano() + ru.Stime.Nano()) // Maxrss is in KiB on Linux
}
