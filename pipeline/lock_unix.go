//go:build unix

package pipeline

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes f's flock without waiting, exclusive or shared, and
// reports whether it got it; a shared lock is released at once.
func tryLock(f *os.File, exclusive bool) (bool, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			if !exclusive {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			}
			return true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		}
		return false, err
	}
}
