//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time this process has used so far, every
// thread's, user and system.
func processCPU() time.Duration {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
