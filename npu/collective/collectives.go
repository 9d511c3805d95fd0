package collective

import (
	"context"
	"fmt"
	"unsafe"
)

// maxFrameElems bounds a frame's payload (1 GiB) so its byte length fits
// the header; buffers so large that 64 segments per chunk would exceed it
// are refused.
const maxFrameElems = 1 << 28

// layout cuts a buffer of count elements into n chunks, chunk c owned by
// rank c: chunk c starts at c*(count/n) + min(c, count%n) and the first
// count%n chunks hold one element more. Chunks are cut into segments of seg
// elements (the last one shorter), the unit of framing and pipelining.
// Every rank derives the same layout from the same count.
type layout struct {
	count, n, seg int
}

func (l layout) chunk(c int) (off, length int) {
	base, rem := l.count/l.n, l.count%l.n
	off = c*base + min(c, rem)
	length = base
	if c < rem {
		length++
	}
	return off, length
}

// segs is the number of segments of a chunk of the given length.
func (l layout) segs(length int) int { return (length + l.seg - 1) / l.seg }

// segment returns the offset and length of segment k inside a chunk.
func (l layout) segment(length, k int) (off, n int) {
	off = k * l.seg
	return off, min(l.seg, length-off)
}

// newLayout chooses the segment size for chunks of at most maxChunk
// elements: the configured size, or larger so no chunk has more than
// maxSegments segments.
func (c *Comm) newLayout(count, maxChunk int) (layout, error) {
	seg := c.segElems
	if need := (maxChunk + maxSegments - 1) / maxSegments; need > seg {
		seg = need
	}
	if seg > maxFrameElems {
		return layout{}, fmt.Errorf("%w: %d elements is too large", ErrBuffer, count)
	}
	return layout{count: count, n: c.size, seg: seg}, nil
}

func (c *Comm) ensureScratch(seg int) {
	if len(c.tmp) < seg {
		c.tmp = make([]float32, seg)
		c.acc = make([]float32, seg)
	}
}

func badOp(op Op) error { return fmt.Errorf("%w: unknown reduce op %d", ErrConfig, op) }

// overlap reports whether a and b share memory.
func overlap(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+4*uintptr(len(b)) && b0 < a0+4*uintptr(len(a))
}

func sameStart(a, b []float32) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// AllReduce reduces buf element-wise over all ranks, in place: afterwards
// every rank holds the same values, bit for bit. The order of reduction is
// fixed by the algorithm (see the package documentation); with Mesh it is
// rank order 0, 1, ..., n-1.
func (c *Comm) AllReduce(ctx context.Context, buf []float32, op Op) error {
	if !op.valid() {
		return c.abortCall(opAllReduce, badOp(op))
	}
	lay, err := c.newLayout(len(buf), (len(buf)+c.size-1)/c.size)
	if err != nil {
		return c.abortCall(opAllReduce, err)
	}
	return c.run(ctx, opAllReduce, uint64(len(buf)), uint32(op), func() error {
		if c.size == 1 || len(buf) == 0 {
			finish(op, buf, 1)
			return nil
		}
		if reg, off, ok := c.shm.region(c.rank, buf); ok {
			if len(buf) <= stageDirectMax && c.stagingFlat() {
				// A small buffer is reduced whole by every rank from the
				// others' staged copies: one wait instead of two barriers,
				// which on a machine with more ranks than cores costs a
				// round of scheduling every rank more than the data. Rank
				// order, so the same bits as the Alloc path.
				c.announceTCP()
				if staged, err := c.stagedReduce(buf, op, c.shm.members, c.rank); staged {
					return err
				}
			}
			return c.shmAllReduce(buf, op, reg, off)
		}
		if staged, err := c.stagedAllReduce(buf, op); staged {
			return err
		}
		c.announceTCP()
		c.ensureScratch(lay.seg)
		if c.cfg.Algorithm == Ring {
			if err := c.ringReduceScatter(buf, lay, op, true); err != nil {
				return err
			}
			return c.ringGather(buf, lay)
		}
		o, l := lay.chunk(c.rank)
		if err := c.meshReduceScatter(buf, buf[o:o+l], lay, op, true); err != nil {
			return err
		}
		return c.meshGather(buf, lay)
	})
}

// ReduceScatter reduces send element-wise over all ranks and leaves block
// r of the result, elements [r*len(recv), (r+1)*len(recv)), in rank r's
// recv. len(send) must be Size()*len(recv); send is not modified and must
// not overlap recv.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv []float32, op Op) error {
	switch {
	case !op.valid():
		return c.abortCall(opReduceScatter, badOp(op))
	case len(send) != c.size*len(recv):
		return c.abortCall(opReduceScatter, fmt.Errorf("%w: send has %d elements, want %d ranks × recv's %d", ErrBuffer, len(send), c.size, len(recv)))
	case overlap(send, recv):
		return c.abortCall(opReduceScatter, fmt.Errorf("%w: send and recv overlap", ErrBuffer))
	}
	lay, err := c.newLayout(len(send), len(recv))
	if err != nil {
		return c.abortCall(opReduceScatter, err)
	}
	return c.run(ctx, opReduceScatter, uint64(len(send)), uint32(op), func() error {
		if c.size == 1 || len(recv) == 0 {
			copy(recv, send)
			finish(op, recv, 1)
			return nil
		}
		if reg, off, ok := c.shm.flatRegion(c.rank, send); ok {
			return c.shmReduceScatter(send, recv, op, reg, off)
		}
		c.announceTCP()
		c.ensureScratch(lay.seg)
		if c.cfg.Algorithm == Mesh {
			return c.meshReduceScatter(send, recv, lay, op, false)
		}
		if len(c.work) < len(send) {
			c.work = make([]float32, len(send))
		}
		w := c.work[:len(send)]
		copy(w, send)
		if err := c.ringReduceScatter(w, lay, op, false); err != nil {
			return err
		}
		o, l := lay.chunk(c.rank)
		copy(recv, w[o:o+l])
		return nil
	})
}

// AllGather concatenates every rank's send into recv in rank order: rank
// p's send lands at recv[p*len(send):]. len(recv) must be
// Size()*len(send). send may be exactly this rank's block of recv (in
// place); otherwise the two must not overlap.
func (c *Comm) AllGather(ctx context.Context, send, recv []float32) error {
	b := len(send)
	switch {
	case len(recv) != c.size*b:
		return c.abortCall(opAllGather, fmt.Errorf("%w: recv has %d elements, want %d ranks × send's %d", ErrBuffer, len(recv), c.size, b))
	case overlap(send, recv) && !sameStart(send, recv[c.rank*b:]):
		return c.abortCall(opAllGather, fmt.Errorf("%w: send overlaps recv other than as this rank's block", ErrBuffer))
	}
	lay, err := c.newLayout(len(recv), b)
	if err != nil {
		return c.abortCall(opAllGather, err)
	}
	return c.run(ctx, opAllGather, uint64(len(recv)), 0, func() error {
		o := c.rank * b
		own := recv[o : o+b]
		if !sameStart(send, own) {
			copy(own, send)
		}
		if c.size == 1 || b == 0 {
			return nil
		}
		if reg, off, ok := c.shm.flatRegion(c.rank, recv); ok {
			return c.shmAllGather(recv, b, reg, off)
		}
		if c.stagingFlat() && 4*b <= stageHalfBytes {
			return c.stagedAllGather(recv, b)
		}
		c.announceTCP()
		for k := 0; k < lay.segs(b); k++ {
			so, sl := lay.segment(b, k)
			seg := own[so : so+sl]
			if c.cfg.Algorithm == Ring {
				if err := c.post(c.peers[(c.rank+1)%c.size], phaseGather, o+so, seg); err != nil {
					return err
				}
				continue
			}
			for d := 1; d < c.size; d++ {
				if err := c.post(c.peers[(c.rank+d)%c.size], phaseGather, o+so, seg); err != nil {
					return err
				}
			}
		}
		if c.cfg.Algorithm == Ring {
			return c.ringGather(recv, lay)
		}
		return c.meshGather(recv, lay)
	})
}

// Broadcast copies root's buf into every other rank's buf. The data flows
// along the ring from root, segment by segment, so each link carries the
// buffer once.
func (c *Comm) Broadcast(ctx context.Context, buf []float32, root int) error {
	if root < 0 || root >= c.size {
		return c.abortCall(opBroadcast, fmt.Errorf("%w: root %d out of range 0-%d", ErrConfig, root, c.size-1))
	}
	lay, err := c.newLayout(len(buf), len(buf))
	if err != nil {
		return c.abortCall(opBroadcast, err)
	}
	return c.run(ctx, opBroadcast, uint64(len(buf)), uint32(root), func() error {
		if c.size == 1 || len(buf) == 0 {
			return nil
		}
		if reg, off, ok := c.shm.flatRegion(c.rank, buf); ok {
			return c.shmBroadcast(buf, root, reg, off)
		}
		c.announceTCP()
		next, prev := c.peers[(c.rank+1)%c.size], c.peers[(c.rank-1+c.size)%c.size]
		last := (c.rank-root+c.size)%c.size == c.size-1
		for k := 0; k < lay.segs(len(buf)); k++ {
			so, sl := lay.segment(len(buf), k)
			seg := buf[so : so+sl]
			if c.rank != root {
				if err := c.recv(prev, phaseDirect, so, seg); err != nil {
					return err
				}
			}
			if !last {
				if err := c.post(next, phaseDirect, so, seg); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, opBarrier, 0, 0, func() error {
		for _, p := range c.peers {
			if p != nil {
				if err := c.post(p, phaseDirect, 0, nil); err != nil {
					return err
				}
			}
		}
		for _, p := range c.peers {
			if p != nil {
				if err := c.recv(p, phaseDirect, 0, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// AllToAll sends block p of send, elements [p*b, (p+1)*b) with
// b = len(send)/Size(), to rank p, which stores it as block r of its recv
// (r = this rank). send and recv have the same length, a multiple of
// Size(), and must not overlap.
func (c *Comm) AllToAll(ctx context.Context, send, recv []float32) error {
	switch {
	case len(send) != len(recv) || len(send)%c.size != 0:
		return c.abortCall(opAllToAll, fmt.Errorf("%w: send has %d elements and recv %d, want equal multiples of %d ranks", ErrBuffer, len(send), len(recv), c.size))
	case overlap(send, recv):
		return c.abortCall(opAllToAll, fmt.Errorf("%w: send and recv overlap", ErrBuffer))
	}
	b := len(send) / c.size
	lay, err := c.newLayout(len(send), b)
	if err != nil {
		return c.abortCall(opAllToAll, err)
	}
	return c.run(ctx, opAllToAll, uint64(len(send)), 0, func() error {
		r := c.rank
		copy(recv[r*b:(r+1)*b], send[r*b:(r+1)*b])
		if c.size == 1 || b == 0 {
			return nil
		}
		if c.stagingFlat() {
			// An exchange of equal blocks, for ordinary and Alloc memory alike.
			return c.stagedExchange(blocks(send, b), blocks(recv, b))
		}
		c.announceTCP()
		for k := 0; k < lay.segs(b); k++ {
			so, sl := lay.segment(b, k)
			for d := 1; d < c.size; d++ {
				p := (r + d) % c.size
				if err := c.post(c.peers[p], phaseDirect, p*b+so, send[p*b+so:p*b+so+sl]); err != nil {
					return err
				}
			}
		}
		for p, pr := range c.peers {
			if pr == nil {
				continue
			}
			for k := 0; k < lay.segs(b); k++ {
				so, sl := lay.segment(b, k)
				if err := c.recv(pr, phaseDirect, r*b+so, recv[p*b+so:p*b+so+sl]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// meshReduceScatter sends chunk p of src to rank p for every p, and reduces
// this rank's chunk into out in rank order: out = ((x0 op x1) op x2) ... op
// x(n-1), segment by segment. out has the chunk's length and is either
// this rank's chunk of src (in place) or disjoint from src. With gather, each finished segment is sent to every other rank.
//
// Queued frames per peer stay below the queue capacity (at most
// maxSegments contributions plus maxSegments gathered segments), so
// queuing never blocks and no rank waits on a rank that waits on it.
func (c *Comm) meshReduceScatter(src, out []float32, lay layout, op Op, gather bool) error {
	r, n := c.rank, c.size
	_, most := lay.chunk(0)
	for k := 0; k < lay.segs(most); k++ {
		for d := 1; d < n; d++ {
			p := (r + d) % n
			o, l := lay.chunk(p)
			if k >= lay.segs(l) {
				continue
			}
			so, sl := lay.segment(l, k)
			if err := c.post(c.peers[p], phaseReduce, o+so, src[o+so:o+so+sl]); err != nil {
				return err
			}
		}
	}
	o, l := lay.chunk(r)
	mine := src[o : o+l]
	inPlace := sameStart(out, mine)
	for k := 0; k < lay.segs(l); k++ {
		so, sl := lay.segment(l, k)
		dst, own := out[so:so+sl], mine[so:so+sl]
		if r == 0 {
			if !inPlace {
				copy(dst, own)
			}
		} else {
			acc := dst
			if inPlace {
				acc = c.acc[:sl]
			}
			if err := c.recv(c.peers[0], phaseReduce, o+so, acc); err != nil {
				return err
			}
			for p := 1; p < r; p++ {
				tmp := c.tmp[:sl]
				if err := c.recv(c.peers[p], phaseReduce, o+so, tmp); err != nil {
					return err
				}
				reduceInto(op, acc, tmp)
			}
			reduce3(op, dst, acc, own)
		}
		for p := r + 1; p < n; p++ {
			tmp := c.tmp[:sl]
			if err := c.recv(c.peers[p], phaseReduce, o+so, tmp); err != nil {
				return err
			}
			reduceInto(op, dst, tmp)
		}
		finish(op, dst, n)
		if gather {
			for d := 1; d < n; d++ {
				if err := c.post(c.peers[(r+d)%n], phaseGather, o+so, dst); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// meshGather receives every other rank's chunk of w straight into place.
func (c *Comm) meshGather(w []float32, lay layout) error {
	for p, pr := range c.peers {
		if pr == nil {
			continue
		}
		o, l := lay.chunk(p)
		for k := 0; k < lay.segs(l); k++ {
			so, sl := lay.segment(l, k)
			if err := c.recv(pr, phaseGather, o+so, w[o+so:o+so+sl]); err != nil {
				return err
			}
		}
	}
	return nil
}

// ringReduceScatter reduces w in place around the ring 0 → 1 → ... → 0.
// In step s (0 <= s < n-1) rank r sends chunk r-1-s to r+1 and receives
// chunk r-2-s (mod n) from r-1, combining the partial result it receives
// with its own values. Chunk c therefore starts at rank c+1 and ends,
// complete, at its owner c: it is reduced in the order x[c+1], x[c+2], ...,
// x[c] whatever the timing. Each segment is sent on as soon as it is
// reduced, so the steps overlap. With gather, the owner's finished segments
// are queued as the first step of ringGather.
//
// No deadlock: every frame a rank queues, except the first chunk's, follows
// a frame it received, so if every rank waited for queue space each link
// would hold more than a chunk's worth of frames (the queue holds
// 4*maxSegments), which the ring as a whole cannot have sent.
func (c *Comm) ringReduceScatter(w []float32, lay layout, op Op, gather bool) error {
	r, n := c.rank, c.size
	next, prev := c.peers[(r+1)%n], c.peers[(r-1+n)%n]
	o, l := lay.chunk((r - 1 + n) % n)
	for k := 0; k < lay.segs(l); k++ {
		so, sl := lay.segment(l, k)
		if err := c.post(next, phaseReduce, o+so, w[o+so:o+so+sl]); err != nil {
			return err
		}
	}
	for s := 0; s < n-1; s++ {
		o, l := lay.chunk(((r-2-s)%n + n) % n)
		for k := 0; k < lay.segs(l); k++ {
			so, sl := lay.segment(l, k)
			seg, tmp := w[o+so:o+so+sl], c.tmp[:sl]
			if err := c.recv(prev, phaseReduce, o+so, tmp); err != nil {
				return err
			}
			reduce3(op, seg, tmp, seg)
			switch {
			case s < n-2:
				if err := c.post(next, phaseReduce, o+so, seg); err != nil {
					return err
				}
			case gather:
				finish(op, seg, n)
				if err := c.post(next, phaseGather, o+so, seg); err != nil {
					return err
				}
			default:
				finish(op, seg, n)
			}
		}
	}
	return nil
}

// ringGather completes w around the ring once this rank's chunk has been
// queued to the next rank: in step s it receives chunk r-1-s from r-1 into
// place and forwards it unless the next rank owns it.
func (c *Comm) ringGather(w []float32, lay layout) error {
	r, n := c.rank, c.size
	next, prev := c.peers[(r+1)%n], c.peers[(r-1+n)%n]
	for s := 0; s < n-1; s++ {
		o, l := lay.chunk(((r-1-s)%n + n) % n)
		for k := 0; k < lay.segs(l); k++ {
			so, sl := lay.segment(l, k)
			seg := w[o+so : o+so+sl]
			if err := c.recv(prev, phaseGather, o+so, seg); err != nil {
				return err
			}
			if s < n-2 {
				if err := c.post(next, phaseGather, o+so, seg); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// blocks cuts buf into blocks of b elements.
func blocks(buf []float32, b int) [][]float32 {
	out := make([][]float32, len(buf)/b)
	for i := range out {
		out[i] = buf[i*b : (i+1)*b]
	}
	return out
}
