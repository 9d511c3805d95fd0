//go:build unix

package main

import "syscall"

// minorFaults returns the process's minor page faults so far (first touches
// of fresh memory, the cost a per-step allocation pays), or -1.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Minflt
}
