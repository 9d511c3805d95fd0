//go:build linux

package tensor

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHugePages marks the huge pages buf overlaps MADV_HUGEPAGE. Pages
// not yet touched are then faulted in as huge pages; errors (a kernel
// without THP, memory outside the mapping) leave ordinary pages.
func adviseHugePages(buf []float32) {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	end := start + 4*uintptr(len(buf))
	lo := start &^ (hugePageBytes - 1)
	hi := (end + hugePageBytes - 1) &^ (hugePageBytes - 1)
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_HUGEPAGE)
}
