package atomicfile

import (
	"errors"

	"golang.org/x/sys/unix"
)

// exchange swaps the directories a and b in one step where the kernel can
// (renameat2 RENAME_EXCHANGE), else in two renames.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if err == nil || !(errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)) {
		return err
	}
	return exchangeByRenames(a, b)
}
