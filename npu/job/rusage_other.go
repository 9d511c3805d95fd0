//go:build !linux

package job

import "time"

// processUsage is not measured here (ru_maxrss's unit differs between
// systems): zeros, which result.json leaves out.
func processUsage() (peakRSS int64, cpu time.Duration) { return 0, 0 }
