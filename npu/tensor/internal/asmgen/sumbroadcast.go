package main

import "fmt"

// sumbroadcast_amd64.s: the kernel of SumBroadcast, the reduction of
// AllReduce over shared memory.

const (
	// sumBroadcastVecs is the number of 8-float vectors the kernel sums at
	// a time: one block of SumBroadcastBlock (64) floats, all in registers.
	sumBroadcastVecs = 8
	// sumBroadcastAhead is how many bytes ahead of the block it sums the
	// kernel asks for each source's next lines: the hardware prefetcher
	// follows a handful of streams, and a rank reduces 8 or more.
	sumBroadcastAhead = 512
)

func writeSumBroadcast(a *asm) {
	a.text("sumBroadcastAVX2", "(srcs, dsts []unsafe.Pointer, n int, divisor float32, stream bool)",
		`
For i in [0, n): s = srcs[0][i] + srcs[1][i] + ... in that order, divided
by divisor unless its bits are 0, is stored to dsts[k][i] for every k,
with non-temporal stores (they bypass the caches) when stream is set. n
is a multiple of 64; every destination is 32-byte aligned; len(srcs) >= 1.
A destination may be a source: a block is read from every source before it
is stored.`, 61)
	a.lines("MOVQ srcs_base+0(FP), SI", "MOVQ srcs_len+8(FP), R8", "MOVQ dsts_base+24(FP), DI",
		"MOVQ dsts_len+32(FP), R9", "MOVQ n+48(FP), CX",
		"VBROADCASTSS divisor+56(FP), Y15", "MOVL divisor+56(FP), R10", "MOVBLZX stream+60(FP), R11",
		"SHLQ $2, CX", "XORQ AX, AX")
	prefetch := func() {
		for l := 0; l < sumBroadcastVecs*32; l += 64 {
			a.p("\tPREFETCHT0 %d(DX)(AX*1)", sumBroadcastAhead+l)
		}
	}
	a.lines("loop:", "CMPQ AX, CX", "JGE done", "MOVQ (SI), DX")
	prefetch()
	for v := 0; v < sumBroadcastVecs; v++ {
		a.p("\tVMOVUPS %d(DX)(AX*1), Y%d", v*32, v)
	}
	a.lines("MOVQ $1, BX", "addsrc:", "CMPQ BX, R8", "JGE scale", "MOVQ (SI)(BX*8), DX")
	prefetch()
	for v := 0; v < sumBroadcastVecs; v++ {
		a.p("\tVADDPS %d(DX)(AX*1), Y%d, Y%d", v*32, v, v)
	}
	a.lines("INCQ BX", "JMP addsrc", "scale:", "TESTL R10, R10", "JZ store")
	for v := 0; v < sumBroadcastVecs; v++ {
		a.p("\tVDIVPS Y15, Y%d, Y%d", v, v)
	}
	a.lines("store:", "XORQ BX, BX", "TESTQ R11, R11", "JNZ streamdst")
	// A destination that is also a source has the block's lines in the L1
	// cache, just read: plain stores hit them, where non-temporal ones
	// would first have to evict them.
	a.lines("storedst:", "CMPQ BX, R9", "JGE next", "MOVQ (DI)(BX*8), DX")
	for v := 0; v < sumBroadcastVecs; v++ {
		a.p("\tVMOVUPS Y%d, %d(DX)(AX*1)", v, v*32)
	}
	a.lines("INCQ BX", "JMP storedst")
	a.lines("streamdst:", "CMPQ BX, R9", "JGE next", "MOVQ (DI)(BX*8), DX")
	for v := 0; v < sumBroadcastVecs; v++ {
		a.p("\tVMOVNTPS Y%d, %d(DX)(AX*1)", v, v*32)
	}
	a.lines("INCQ BX", "JMP streamdst", "next:", fmt.Sprintf("ADDQ $%d, AX", sumBroadcastVecs*32), "JMP loop",
		"done:", "SFENCE")
	a.ret()
}
