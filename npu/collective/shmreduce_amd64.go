package collective

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// addBcastBlock is the element count the vector kernel works in.
const addBcastBlock = 64

var haveAddBcast = cpu.X86.HasAVX2

// addBcastNT is implemented in shmreduce_amd64.s.
//
//go:noescape
func addBcastNT(srcs, dsts []unsafe.Pointer, n int, divisor float32)
