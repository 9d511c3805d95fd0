//go:build unix

package userfile

import (
	"os"
	"syscall"
)

// openFlags keeps an open of a FIFO from waiting for a writer.
const openFlags = syscall.O_NONBLOCK

// clearNonblock restores blocking reads on a regular file opened with
// O_NONBLOCK (a no-op for regular files on Linux, but not promised by POSIX).
func clearNonblock(f *os.File) error {
	return syscall.SetNonblock(int(f.Fd()), false)
}
