//go:build !unix

package main

import "time"

// cpuTime is not available here: the CPU column reads 0.
func cpuTime() time.Duration { return 0 }
