//go:build unix

package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/internal/bytesize"
	"golang.org/x/sys/unix"
)

// Lock takes target's one-writer lock without waiting: an flock on
// LockName(target), which is removed again by unlock. A second writer of
// the same target gets an error wrapping ErrLocked at once. The lock dies
// with its process, so a killed writer never blocks the next.
func Lock(target string) (unlock func(), err error) {
	path := LockName(target)
	// The lock file is removed while held: one opened before that removal
	// locks a file no longer at path, so the lock is taken again.
	for range 8 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", target, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("output %s: %w (lock %s held); wait for it or write elsewhere", target, ErrLocked, path)
			}
			return nil, fmt.Errorf("lock %s: %w", target, err)
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return func() {
				os.Remove(path)
				f.Close()
			}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("lock %s: the lock file keeps being replaced: %w", target, ErrLocked)
}

// CheckSpace refuses a write of need bytes under dir (or its nearest
// existing parent) when the file system has less room for an unprivileged
// user.
func CheckSpace(dir string, need int64) error {
	for {
		var st unix.Statfs_t
		err := unix.Statfs(dir, &st)
		if err == nil {
			free := int64(st.Bavail) * int64(st.Bsize)
			if free >= 0 && need > free {
				return fmt.Errorf("%s: the output needs %s, the file system has %s free: %w", dir, bytesize.Format(need), bytesize.Format(free), ErrNoSpace)
			}
			return nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("free space of %s: %w", dir, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}
