//go:build linux

package collective

import (
	"fmt"
	"os"
	"syscall"
)

// mapSparse maps size bytes of the staging file at path, creating it first
// when create is set (an existing file is an error, as for mapShared). The
// file gets its size but no memory: the owner allocates the part it uses
// with commitRange, so the mapping can be far larger than what a job ever
// stages. The creator keeps the returned file open to commit more later;
// other ranks get nil.
func mapSparse(path string, size int, create bool) ([]byte, *os.File, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) ([]byte, *os.File, error) {
		f.Close()
		if create {
			_ = os.Remove(path)
		}
		return nil, nil, err
	}
	if create {
		if err := f.Truncate(int64(size)); err != nil {
			return fail(fmt.Errorf("size %s: %w", path, err))
		}
	} else if st, err := f.Stat(); err != nil {
		return fail(err)
	} else if st.Size() != int64(size) {
		return fail(fmt.Errorf("%s has %d bytes, want %d", path, st.Size(), size))
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mmap %s: %w", path, err))
	}
	if !create {
		f.Close()
		return b, nil, nil
	}
	return b, f, nil
}

// commitRange allocates the memory of bytes [off, off+n) of a staging
// file, so that a full tmpfs is an error here instead of a SIGBUS when the
// mapping is written.
func commitRange(f *os.File, off, n int64) error {
	if err := syscall.Fallocate(int(f.Fd()), 0, off, n); err != nil {
		return fmt.Errorf("allocate %d bytes of %s: %w", n, f.Name(), err)
	}
	return nil
}
