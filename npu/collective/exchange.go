package collective

import (
	"context"
	"fmt"
)

// Exchange sends send[p] to rank p and receives recv[p] from rank p, for
// every p (AllToAllv): the redistribution between two tensor layouts.
// len(send) == len(recv) == Size(); send[r] is copied into recv[r] for this
// rank r. Lengths may differ per pair and may be 0, but len(recv[p]) on
// this rank must equal len(send[r]) on rank p: a mismatch fails the call
// with ErrOutOfStep naming the sending rank and both lengths. Every rank
// calls Exchange, the same number of times, like every collective, even
// when all its blocks are empty. A recv block must not overlap any other
// block, except that recv[r] may be send[r] itself; send blocks may overlap
// each other.
//
// Between ranks of one server that share memory, a pair's block travels
// through the sender's staging memory (shm_exchange.go). Otherwise it
// travels over the data connection between the two ranks: first a
// header-only frame that carries the pair's length (the receiver checks it
// before reading any data), then the block cut into segments like
// AllToAll's.
func (c *Comm) Exchange(ctx context.Context, send, recv [][]float32) error {
	if err := c.checkExchange(send, recv); err != nil {
		return c.abortCall(opExchange, err)
	}
	// No call-wide element count exists that every rank knows, so the
	// header's count is 0 and the length frames check each pair.
	return c.run(ctx, opExchange, 0, 0, func() error {
		if c.shm != nil && c.shm.stg != nil {
			return c.stagedExchange(send, recv)
		}
		r, n := c.rank, c.size
		copy(recv[r], send[r])
		for d := 1; d < n; d++ {
			p := (r + d) % n
			if err := c.postPair(c.peers[p], send[p]); err != nil {
				return err
			}
		}
		// Rank r-d posted to r in its step d: reading in that order
		// spreads the ranks over their peers instead of all reading from
		// rank 0 first.
		for d := 1; d < n; d++ {
			p := (r - d + n) % n
			if err := c.recvPair(c.peers[p], recv[p]); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkExchange validates Exchange's arguments on this rank.
func (c *Comm) checkExchange(send, recv [][]float32) error {
	if len(send) != c.size || len(recv) != c.size {
		return fmt.Errorf("%w: send has %d blocks and recv %d, want one per rank (%d)", ErrBuffer, len(send), len(recv), c.size)
	}
	r := c.rank
	if len(send[r]) != len(recv[r]) {
		return fmt.Errorf("%w: this rank's own blocks differ: send[%d] has %d elements, recv[%d] %d", ErrBuffer, r, len(send[r]), r, len(recv[r]))
	}
	for p := range recv {
		for _, b := range [][]float32{send[p], recv[p]} {
			if c.pairSeg(len(b)) > maxFrameElems {
				return fmt.Errorf("%w: block %d of %d elements is too large", ErrBuffer, p, len(b))
			}
		}
		for q := range send {
			if overlap(recv[p], send[q]) && !(p == r && q == r && sameStart(recv[r], send[r])) {
				return fmt.Errorf("%w: recv[%d] overlaps send[%d]", ErrBuffer, p, q)
			}
			if q != p && overlap(recv[p], recv[q]) {
				return fmt.Errorf("%w: recv[%d] overlaps recv[%d]", ErrBuffer, p, q)
			}
		}
	}
	return nil
}

// pairSeg is the segment size of an exchanged block of n elements: the
// configured size, or larger so no block has more than maxSegments
// segments (which keeps a call's frames per peer within the send queue).
// Both ends derive it from the same length.
func (c *Comm) pairSeg(n int) int {
	return max(c.segElems, (n+maxSegments-1)/maxSegments)
}

// postPair queues the length frame and the segments of block b for p.
func (c *Comm) postPair(p *peer, b []float32) error {
	if err := c.post(p, phaseLength, len(b), nil); err != nil {
		return err
	}
	seg := c.pairSeg(len(b))
	for o := 0; o < len(b); o += seg {
		if err := c.post(p, phaseDirect, o, b[o:min(o+seg, len(b))]); err != nil {
			return err
		}
	}
	return nil
}

// recvPair checks p's length frame against len(dst), then reads p's
// block into dst.
func (c *Comm) recvPair(p *peer, dst []float32) error {
	if err := c.recv(p, phaseLength, len(dst), nil); err != nil {
		return err
	}
	seg := c.pairSeg(len(dst))
	for o := 0; o < len(dst); o += seg {
		if err := c.recv(p, phaseDirect, o, dst[o:min(o+seg, len(dst))]); err != nil {
			return err
		}
	}
	return nil
}

// lengthMismatch describes an Exchange length frame from the right call
// whose length is not the one this rank expects, or returns nil if got
// is not such a frame.
func (c *Comm) lengthMismatch(got, want header) error {
	if got.kind != kindData || got.op != opExchange || want.op != opExchange ||
		got.phase != phaseLength || want.phase != phaseLength || got.nbytes != 0 || got.offset == want.offset {
		return nil
	}
	return fmt.Errorf("%w: in %s it sends %d elements to rank %d, which expects %d",
		ErrOutOfStep, got.describeCall(), got.offset, c.rank, want.offset)
}
