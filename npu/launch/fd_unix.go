//go:build unix

package launch

import (
	"os"

	"golang.org/x/sys/unix"
)

// keepStdout returns a new descriptor for the process's stdout, closed on
// exec, that stays when fd 1 is redirected.
func keepStdout() (*os.File, error) {
	fd, err := unix.FcntlInt(1, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "launcher-stdout"), nil
}

// redirectOutput makes file descriptors 1 and 2 refer to f.
func redirectOutput(f *os.File) error {
	for _, fd := range []int{1, 2} {
		if err := unix.Dup2(int(f.Fd()), fd); err != nil {
			return err
		}
	}
	return nil
}
