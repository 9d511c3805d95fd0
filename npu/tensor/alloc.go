package tensor

// hugePageBytes is the size of a transparent huge page on the CPUs this
// package tunes for (x86-64 and arm64 with 4 KiB base pages).
const hugePageBytes = 2 << 20

// Alloc returns n zeroed floats. A buffer of at least a huge page asks the
// OS to back it with transparent huge pages where the OS leaves that to the
// program (Linux with THP in "madvise" mode): the convolution layouts walk a
// batch channel by channel, tens to hundreds of kilobytes apart, so a tile
// touches as many 4 KiB pages as it has channels and the TLB misses cost a
// noticeable share of a training step. The advice covers the huge pages
// the buffer overlaps, which may hold neighbouring heap memory too; it
// changes no value, only how the memory is mapped, and is ignored where
// unsupported.
func Alloc(n int) []float32 {
	buf := make([]float32, n)
	if 4*n >= hugePageBytes {
		adviseHugePages(buf)
	}
	return buf
}
