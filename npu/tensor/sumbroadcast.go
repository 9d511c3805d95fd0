package tensor

// SumBroadcastBlock is the number of elements the vector kernel of
// SumBroadcast handles at a time: a call whose length is a multiple of it,
// with 32-byte aligned destinations, runs no Go loop at all.
const SumBroadcastBlock = 64

// SumBroadcast stores into every dsts[d][i] the sum srcs[0][i] + srcs[1][i]
// + … of the sources, added in slice order, divided by divisor unless
// divisor is 0. Every slice has the length of dsts[0] and srcs holds at
// least one; a destination may be a source (the same elements) but must not
// overlap one otherwise. It is the reduction of AllReduce over shared
// memory: one pass reads each source once and writes each destination once.
//
// The order of the additions is fixed, so the result is bit-identical on
// every CPU and architecture. On amd64 with AVX2 an assembly kernel does
// the blocks of SumBroadcastBlock elements from the first 32-byte boundary
// of the destinations (when they share one). When every destination is
// also a source (the same slice), the result goes back into lines the
// kernel has just read, still in the L1 cache, with plain stores; otherwise
// with non-temporal stores, which bypass the caches instead of reading each
// destination line first: meant for buffers too large to stay in them. The
// assembly cannot be preempted, so callers that reduce many megabytes call
// it on pieces.
func SumBroadcast(dsts, srcs [][]float32, divisor float32) {
	sumBroadcast(useSumAsm(), dsts, srcs, divisor)
}

func sumBroadcast(asm bool, dsts, srcs [][]float32, divisor float32) {
	if len(dsts) == 0 {
		return
	}
	n := len(dsts[0])
	if len(srcs) == 0 {
		panic("tensor: SumBroadcast without sources")
	}
	for _, s := range srcs {
		if len(s) != n {
			panic("tensor: SumBroadcast slices of different lengths")
		}
	}
	for _, d := range dsts {
		if len(d) != n {
			panic("tensor: SumBroadcast slices of different lengths")
		}
	}
	if divisor == 0 {
		divisor = 0 // -0 too: the kernel tests the bits
	}
	done := 0
	if asm {
		done = sumBroadcastAsm(dsts, srcs, divisor)
	}
	sumBroadcastGo(dsts, srcs, divisor, done, n)
}

// sumBroadcastGo is SumBroadcast over elements [lo, hi) in Go, a block at a
// time through a buffer on the stack: the destinations may be sources.
func sumBroadcastGo(dsts, srcs [][]float32, divisor float32, lo, hi int) {
	var buf [256]float32
	for b := lo; b < hi; b += len(buf) {
		e := min(b+len(buf), hi)
		acc := buf[:e-b]
		copy(acc, srcs[0][b:e])
		for _, s := range srcs[1:] {
			s = s[b:e]
			for i := range acc {
				acc[i] += s[i]
			}
		}
		if divisor != 0 {
			for i := range acc {
				acc[i] /= divisor
			}
		}
		for _, d := range dsts {
			copy(d[b:e], acc)
		}
	}
}
