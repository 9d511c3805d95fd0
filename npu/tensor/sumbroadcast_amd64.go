//go:build amd64 && !purego

package tensor

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useSumAsm reports whether the AVX2 SumBroadcast kernel can run.
func useSumAsm() bool { return cpu.X86.HasAVX2 }

// sumBroadcastAVX2 is in sumbroadcast_amd64.s: elements [0, n) of every
// source summed and stored to every destination (non-temporal stores when
// stream is set), n a multiple of SumBroadcastBlock, destinations 32-byte
// aligned.
//
//go:noescape
func sumBroadcastAVX2(srcs, dsts []unsafe.Pointer, n int, divisor float32, stream bool)

// sumPointers is how many sources and destinations the kernel's arguments
// hold on the stack; more take a heap allocation per call.
const sumPointers = 16

// sumBroadcastAsm runs the kernel over elements [0, done) of SumBroadcast's
// slices, after doing the elements before the destinations' first 32-byte
// boundary in Go, and returns done: 0 when the destinations do not share
// an alignment or the slices are too short.
func sumBroadcastAsm(dsts, srcs [][]float32, divisor float32) int {
	n := len(dsts[0])
	if n < SumBroadcastBlock {
		return 0
	}
	a := uintptr(unsafe.Pointer(&dsts[0][0])) % 32
	for _, d := range dsts[1:] {
		if uintptr(unsafe.Pointer(&d[0]))%32 != a {
			return 0
		}
	}
	head := int((32-a)%32) / 4
	mid := (n - head) / SumBroadcastBlock * SumBroadcastBlock
	if mid == 0 {
		return 0
	}
	sumBroadcastGo(dsts, srcs, divisor, 0, head)
	var sp, dp [sumPointers]unsafe.Pointer
	ps, pd := sp[:0], dp[:0]
	for _, s := range srcs {
		ps = append(ps, unsafe.Pointer(&s[head]))
	}
	for _, d := range dsts {
		pd = append(pd, unsafe.Pointer(&d[head]))
	}
	sumBroadcastAVX2(ps, pd, mid, divisor, !allIn(pd, ps))
	return head + mid
}

// allIn reports whether every pointer of ps is one of qs.
func allIn(ps, qs []unsafe.Pointer) bool {
	for _, p := range ps {
		found := false
		for _, q := range qs {
			found = found || p == q
		}
		if !found {
			return false
		}
	}
	return true
}
