package host

import "golang.org/x/sys/unix"

// limitMemory caps the data segment (heap and private writable mappings)
// of process pid, and so of every process it starts afterwards. The
// address-space limit (RLIMIT_AS) cannot serve: the Go runtime reserves
// far more address space than it uses and would not start. Shared
// mappings, such as the ranks' /dev/shm buffers, are not counted.
func limitMemory(pid int, limit int64) error {
	lim := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	return unix.Prlimit(pid, unix.RLIMIT_DATA, &lim, nil)
}
