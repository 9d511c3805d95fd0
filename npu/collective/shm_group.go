package collective

// GroupAllReduce (and AllReduce of ordinary buffers) through the staging
// memory of shm_staging.go, when every member is on this server.
//
// Every member copies its buffer into its half of the call. A small
// buffer (stageDirectMax elements at most) is then reduced whole by every
// member, from every member's copy: one wait. A larger one is cut into
// len(group) ranges of whole vector blocks; member j reduces range j from
// every member's copy (its own straight from its buffer) into its buffer
// and its staged copy, publishes "reduced", and copies the other ranges
// from their members' copies once they are reduced: two waits, and each
// element read once per member. Either way each element is reduced in
// group order, as over TCP, so the bits are the same.

import "github.com/mspipe/mspipe/npu/tensor"

// stagedReduce is GroupAllReduce of buf among group (this rank at index
// me), finishing op for len(group) ranks. It reports false, having done
// nothing, when buf does not fit the staging memory; and when a member
// could not stage its buffer it falls back to TCP itself.
func (c *Comm) stagedReduce(buf []float32, op Op, group []int, me int) (bool, error) {
	if 4*len(buf) > stageHalfBytes {
		return false, nil
	}
	st := c.shm.stg
	m := len(group)
	others := c.others(group)
	h, err := c.stageBegin(others)
	if err != nil {
		return true, err
	}
	direct := len(buf) <= stageDirectMax
	lo, hi := stageRange(len(buf), m, me)
	fits := c.stageFits(h, len(buf))
	putGroup(c.putHeader(h, !fits), c.size, group)
	mine := st.half(c.rank, h)
	if fits {
		if direct {
			copy(mine, buf)
		} else { // its own range only this member reads, from buf
			copy(mine[:lo], buf[:lo])
			copy(mine[hi:len(buf)], buf[hi:])
		}
	}
	c.publish(stageWritten)
	tcp := !fits
	for _, q := range others {
		hdr, ok, err := c.awaitWritten(q, h)
		if !ok {
			return true, err
		}
		tcp = tcp || viaTCP(hdr)
	}
	if tcp {
		c.publish(stageDone)
		return true, c.tcpGroupAllReduce(buf, op, group, me)
	}
	srcs := st.srcs[:m]
	for j, q := range group {
		if q == c.rank {
			srcs[j] = buf[:len(buf):len(buf)]
		} else {
			srcs[j] = st.half(q, h)[:len(buf)]
		}
	}
	if direct {
		dsts := st.dsts[:1]
		dsts[0] = buf
		st.reduce(op, dsts, srcs, m)
		c.publish(stageDone)
		return true, nil
	}
	for j := range srcs {
		srcs[j] = srcs[j][lo:hi]
	}
	dsts := st.dsts[:2]
	dsts[0], dsts[1] = buf[lo:hi], mine[lo:hi]
	if hi > lo {
		st.reduce(op, dsts, srcs, m)
	}
	c.publish(stageReduced)
	for j, q := range group {
		if q == c.rank {
			continue
		}
		if err := c.waitStage(q, stageValue(c.cur.seq, stageReduced), false); err != nil {
			return true, err
		}
		qlo, qhi := stageRange(len(buf), m, j)
		copy(buf[qlo:qhi], st.half(q, h)[qlo:qhi])
	}
	c.publish(stageDone)
	return true, nil
}

// stageRange is the range of a buffer of n elements that member j of m
// reduces: whole vector blocks, so the kernel's loads line up.
func stageRange(n, m, j int) (lo, hi int) {
	const block = tensor.SumBroadcastBlock
	blocks := (n + block - 1) / block
	return min(n, j*blocks/m*block), min(n, (j+1)*blocks/m*block)
}

// stagedAllReduce is AllReduce of an ordinary buffer with Mesh when every
// rank is on this server: GroupAllReduce of every rank, whose group order
// is Mesh's rank order. It reports false when it did nothing.
func (c *Comm) stagedAllReduce(buf []float32, op Op) (bool, error) {
	if c.cfg.Algorithm != Mesh || !c.stagingFlat() {
		return false, nil
	}
	c.announceTCP() // not in a barrier of the Alloc path
	return c.stagedReduce(buf, op, c.shm.members, c.rank)
}
