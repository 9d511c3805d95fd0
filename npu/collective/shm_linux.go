//go:build linux

package collective

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// shmSupported reports whether this platform has the shared-memory
// transport: mmap of tmpfs files and futexes between processes.
const shmSupported = true

// mapShared maps size bytes of the file at path, creating it first when
// create is set (an existing file is an error: it belongs to another
// communicator, or was left by a killed rank for RemoveShmLeftovers). The
// file's memory is allocated now, so a full tmpfs is an error here rather
// than a SIGBUS at the first write, and pages are populated so collectives
// do not pay for page faults.
func mapShared(path string, size int, create bool) ([]byte, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if create {
		err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(size))
		if errors.Is(err, syscall.EOPNOTSUPP) {
			err = f.Truncate(int64(size)) // a file system without fallocate: size only
		}
		if err != nil {
			_ = os.Remove(path)
			return nil, fmt.Errorf("allocate %d bytes for %s: %w", size, path, err)
		}
	} else {
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if st.Size() != int64(size) {
			return nil, fmt.Errorf("%s has %d bytes, want %d", path, st.Size(), size)
		}
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		if create {
			_ = os.Remove(path)
		}
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return b, nil
}

// unmap releases a mapping made by mapShared.
func unmap(b []byte) { _ = syscall.Munmap(b) }

// privatize replaces the shared mapping b with private memory holding the
// same bytes at the same address, so slices of it stay valid after the
// communicator that shared it is closed. The copy is made in a new private
// mapping that mremap then moves over b in one step, so a reader never
// sees anything but b's bytes.
func privatize(b []byte) error {
	priv, err := syscall.Mmap(-1, 0, len(b), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	copy(priv, b)
	const mremapMayMove, mremapFixed = 1, 2
	_, _, errno := syscall.Syscall6(syscall.SYS_MREMAP, uintptr(unsafe.Pointer(&priv[0])), uintptr(len(priv)), uintptr(len(b)),
		mremapMayMove|mremapFixed, uintptr(unsafe.Pointer(&b[0])), 0)
	if errno != 0 {
		_ = syscall.Munmap(priv)
		return errno
	}
	return nil
}

const (
	futexWaitOp = 0 // FUTEX_WAIT, not private: the word is shared between processes
	futexWakeOp = 1
)

// futexWait sleeps while *addr == val, at most d.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every process sleeping on addr.
func futexWakeAll(addr *uint32) {
	_, _, _ = syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// ring increments the doorbell and wakes its sleepers.
func ring(bell *uint32) {
	atomic.AddUint32(bell, 1)
	futexWakeAll(bell)
}
