//go:build !linux

package procgroup

// Stopped reports false: only Linux tells (through /proc) whether a
// process is stopped.
func Stopped(int) bool { return false }

// Exited reports false: only Linux tells (through /proc) whether a
// process has exited before it is reaped.
func Exited(int) bool { return false }
