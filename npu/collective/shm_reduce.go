package collective

// The collectives on the shared memory of shm.go, and the kernels that
// reduce the ranks' buffers in place.
//
// An AllReduce takes two barriers (a small one on one server takes the
// staged path of shm_group.go instead: see AllReduce). After the first, every rank of the
// server has published its input. The buffer is cut into pieces, and each
// rank claims the next unclaimed piece (a counter in the control segment)
// until none is left: it reduces the piece straight from every buffer, in
// rank order (the order Mesh uses, so on one server results are the same
// bits as over TCP), and stores the result into every buffer. Which rank
// reduces a piece changes nothing in the result, and the ranks that have
// a CPU do the work: with more ranks than cores (8 on 2 here), a rank the
// scheduler leaves waiting no longer holds back a fixed share. After the
// second barrier every piece is done, so every rank holds the whole result
// and no rank reads another's buffer any more. Each element is read once
// and written once per rank, the least any AllReduce can move. With
// several servers, each rank reduces a fixed chunk, which is combined
// over TCP with the same chunk of the other servers (see combineColumn).

import (
	"sync/atomic"
	"unsafe"

	"github.com/mspipe/mspipe/npu/tensor"
)

const (
	shmFallback    = 1024    // elements per block of the portable reduction
	shmKernelPiece = 1 << 16 // elements per call of tensor.SumBroadcast (a multiple of its block)
)

// shmAllReduce is AllReduce of buf, which lies at offset off of reg.
//
// On one server, the ranks share the pieces out as they come (see
// reduceClaimed). With several servers, the rank at index l of its server
// reduces block range l of the buffer (blocks of tensor.SumBroadcastBlock
// elements, so the vector kernel gets whole blocks) of its own server's
// buffers into its own buffer, combines that partial result with those of
// the ranks at index l of the other servers over TCP, in server order, and
// stores the total into every buffer of its server: a sum over servers of
// sums over each server's ranks.
func (c *Comm) shmAllReduce(buf []float32, op Op, reg *shmRegion, off int) error {
	g := c.shm
	if err := c.shmPublish(reg.id, off); err != nil {
		return err
	}
	if g.flat() {
		g.reduceClaimed(reg, off, off+len(buf), op, c.size)
		return c.shmBarrier() // every piece is done: every rank has claimed until none was left
	}
	n := len(g.members)
	const block = tensor.SumBroadcastBlock
	blocks := (len(buf) + block - 1) / block
	lo := min(len(buf), g.local*blocks/n*block)
	hi := min(len(buf), (g.local+1)*blocks/n*block)
	partial := op
	if op == Mean {
		partial = Sum // divided once, at the end
	}
	g.reduce(reg, off+lo, off+hi, partial, g.members, []int{c.rank}, 0)
	if err := c.combineColumn(reg.views, off, lo, hi, partial, op); err != nil {
		return err
	}
	return c.shmBarrier()
}

// combineColumn combines elements [off+lo, off+hi) of this rank's buffer,
// its server's partial result, with those of the other ranks of its column
// over TCP, in server order, finishes op for the job's size and stores the
// result into the same elements of every buffer of the server.
func (c *Comm) combineColumn(views [][]float32, off, lo, hi int, partial, op Op) error {
	g := c.shm
	if hi <= lo {
		return nil
	}
	seg := max(c.segElems, (hi-lo+maxSegments-1)/maxSegments)
	if len(c.work) < hi-lo {
		c.work = make([]float32, hi-lo)
	}
	// Send a copy: the result overwrites this rank's buffer before the
	// peers may have read what was sent from it.
	mine := c.work[:hi-lo]
	copy(mine, views[c.rank][off+lo:off+hi])
	for so := 0; so < hi-lo; so += seg {
		sl := min(seg, hi-lo-so)
		for _, p := range g.column {
			if p != c.rank {
				if err := c.post(c.peers[p], phaseReduce, lo+so, mine[so:so+sl]); err != nil {
					return err
				}
			}
		}
	}
	c.ensureScratch(seg)
	for so := 0; so < hi-lo; so += seg {
		sl := min(seg, hi-lo-so)
		acc, got := c.acc[:sl], c.tmp[:sl]
		for j, p := range g.column {
			in := mine[so : so+sl]
			if p != c.rank {
				if err := c.recv(c.peers[p], phaseReduce, lo+so, got); err != nil {
					return err
				}
				in = got
			}
			if j == 0 {
				copy(acc, in)
			} else {
				reduceInto(partial, acc, in)
			}
		}
		finish(op, acc, c.size)
		for _, q := range g.members {
			copy(views[q][off+lo+so:off+lo+so+sl], acc)
		}
	}
	return nil
}

// shmReduceScatter is ReduceScatter of send, which lies at offset off of
// reg: rank r reduces block r of every rank's send, in rank order, into
// its recv.
func (c *Comm) shmReduceScatter(send, recv []float32, op Op, reg *shmRegion, off int) error {
	if err := c.shmPublish(reg.id, off); err != nil {
		return err
	}
	base := off + c.rank*len(recv)
	c.shm.reduceOut(reg, base, recv, op, c.size)
	return c.shmBarrier() // no rank changes its send before every rank has read it
}

// shmAllGather is AllGather into recv, which lies at offset off of reg and
// already holds this rank's block b elements long: every rank copies block
// q from rank q's recv.
func (c *Comm) shmAllGather(recv []float32, b int, reg *shmRegion, off int) error {
	if err := c.shmPublish(reg.id, off); err != nil {
		return err
	}
	for q := 0; q < c.size; q++ {
		if q != c.rank {
			copy(recv[q*b:(q+1)*b], reg.views[q][off+q*b:off+(q+1)*b])
		}
	}
	return c.shmBarrier() // no rank changes its recv before every rank has read its block
}

// shmBroadcast is Broadcast of buf, which lies at offset off of reg: every
// rank copies root's.
func (c *Comm) shmBroadcast(buf []float32, root int, reg *shmRegion, off int) error {
	if err := c.shmPublish(reg.id, off); err != nil {
		return err
	}
	if c.rank != root {
		copy(buf, reg.views[root][off:off+len(buf)])
	}
	return c.shmBarrier() // root keeps buf unchanged until every rank has it
}

// reduce reduces elements [lo, hi) of the buffers of the ranks from, in
// that order, finishes op for n ranks (n 0: not at all) and stores the
// result into the buffers of the ranks to.
func (g *shmGroup) reduce(reg *shmRegion, lo, hi int, op Op, from, to []int, n int) {
	if op != Sum && op != Mean {
		g.reducePortable(reg, lo, hi, op, from, to, n)
		return
	}
	var divisor float32
	if op == Mean && n > 0 {
		divisor = float32(n)
	}
	srcs, dsts := g.srcs[:len(from)], g.dsts[:len(to)]
	// In pieces: the Go scheduler cannot preempt the vector kernel, and a
	// stop-the-world pause should not wait for a whole chunk. Pieces end
	// at multiples of shmKernelPiece of the region, so all but the first
	// start where the buffers are aligned and need no Go loop.
	for p := lo; p < hi; {
		e := min(hi, (p/shmKernelPiece+1)*shmKernelPiece)
		for i, q := range from {
			srcs[i] = reg.views[q][p:e]
		}
		for i, q := range to {
			dsts[i] = reg.views[q][p:e]
		}
		tensor.SumBroadcast(dsts, srcs, divisor)
		p = e
	}
}

// reduceOut reduces elements [lo, lo+len(dst)) of every member's buffer,
// in rank order, finishes op for n ranks and stores the result into dst,
// which may be any memory.
func (g *shmGroup) reduceOut(reg *shmRegion, lo int, dst []float32, op Op, n int) {
	if op != Sum && op != Mean {
		g.reduceOutPortable(reg, lo, dst, op, g.members, n)
		return
	}
	var divisor float32
	if op == Mean {
		divisor = float32(n)
	}
	srcs, dsts := g.srcs[:len(g.members)], g.dsts[:1]
	for p := 0; p < len(dst); p += shmKernelPiece {
		e := min(p+shmKernelPiece, len(dst))
		for i, q := range g.members {
			srcs[i] = reg.views[q][lo+p : lo+e]
		}
		dsts[0] = dst[p:e]
		tensor.SumBroadcast(dsts, srcs, divisor)
	}
}

// reduceOutPortable reduces elements [lo, lo+len(dst)) of the buffers of
// the ranks from, in that order, into dst in Go, finishing op for n ranks
// (n 0: not at all), a cache-sized block at a time.
func (g *shmGroup) reduceOutPortable(reg *shmRegion, lo int, dst []float32, op Op, from []int, n int) {
	for b := 0; b < len(dst); b += shmFallback {
		e := min(b+shmFallback, len(dst))
		acc := dst[b:e]
		copy(acc, reg.views[from[0]][lo+b:lo+e])
		for _, q := range from[1:] {
			reduceInto(op, acc, reg.views[q][lo+b:lo+e])
		}
		if n > 0 {
			finish(op, acc, n)
		}
	}
}

// reducePortable is reduce in Go, a cache-sized block at a time, so the
// result can be stored into buffers that are also inputs.
func (g *shmGroup) reducePortable(reg *shmRegion, lo, hi int, op Op, from, to []int, n int) {
	for b := lo; b < hi; b += shmFallback {
		e := min(b+shmFallback, hi)
		acc := g.acc[:e-b]
		g.reduceOutPortable(reg, b, acc, op, from, n)
		for _, q := range to {
			copy(reg.views[q][b:e], acc)
		}
	}
}

// shmClaimOff is where the claim counter of reduceClaimed lies in the
// control segment: in the doorbell's slot, after the nonce (read only by
// Init), on a cache line of its own apart from the doorbell's.
const shmClaimOff = shmNonceOff + 32

// reduceClaimed reduces elements [lo, hi) of every member's buffer, in
// rank order, finishes op for n ranks and stores the result into every
// member's buffer, a piece at a time, each piece by the rank that claims
// it. Every member calls it for the same call; it returns when no piece
// is left to claim, which is before the other ranks have finished theirs.
//
// The claim counter only grows: each call's pieces are numbers
// g.claimed…g.claimed+k−1, and every member advances g.claimed by the same
// k, so a call never takes a piece of the one before. The counter is at
// g.claimed when every member starts: a member leaves the loop once every
// piece is claimed, before the others have reduced theirs, but the call's
// second barrier waits for all of them, and the next call claims only
// after its own first barrier. Claims are
// compare-and-swaps rather than additions so the counter stops exactly at
// the call's last piece. Pieces end at multiples of their size in the
// region, so the vector kernel gets aligned destinations.
func (g *shmGroup) reduceClaimed(reg *shmRegion, lo, hi int, op Op, n int) {
	next := (*uint64)(unsafe.Pointer(&g.ctl[shmClaimOff]))
	piece := claimPiece(hi-lo, len(g.members))
	first := lo / piece
	k := uint64((hi-1)/piece - first + 1)
	base := g.claimed
	g.claimed += k
	for {
		v := atomic.LoadUint64(next)
		if v >= base+k {
			return
		}
		if !atomic.CompareAndSwapUint64(next, v, v+1) {
			continue
		}
		p := (first + int(v-base)) * piece
		g.reduce(reg, max(lo, p), min(hi, p+piece), op, g.members, g.members, n)
	}
}

// claimPiece returns the piece size of reduceClaimed for count elements
// and n ranks: shmKernelPiece (256 KiB of float32, with its 8 or so
// buffers within the L2 TLB's reach, and enough pieces per rank that the
// last to finish keeps the others waiting little), or less, a whole number
// of vector blocks, so that a small buffer still gives every rank a piece.
func claimPiece(count, n int) int {
	const block = tensor.SumBroadcastBlock
	per := (count + n - 1) / n
	return min(shmKernelPiece, max(block, (per+block-1)/block*block))
}
