package collective

import (
	"context"
	"fmt"
	"hash/fnv"
)

// GroupAllReduce reduces buf element-wise, in place, over the ranks of
// group: afterwards every member holds the same values, bit for bit,
// reduced in group order ((x_g0 op x_g1) op x_g2) ..., where x_gj is the
// buf of rank group[j]; Mean is that Sum divided by len(group). group is
// sorted ascending, without repeats, and contains this rank. Every rank of
// the job calls GroupAllReduce at the same time with its own group, and
// the groups partition the ranks (a rank alone in its group still calls
// and gets buf back unchanged). Members must pass the same length, op and
// group; a member that disagrees is reported as out of step.
//
// When every member is on this server and shares memory with it, the
// members reduce through staging memory (shm_group.go), with any buffer.
// Otherwise, like Mesh, buf is cut into len(group) chunks; member j
// receives chunk j of every other member, reduces it in group order and
// sends the result to every other member, through point-to-point frames
// on the data connections. Both give the same bits.
func (c *Comm) GroupAllReduce(ctx context.Context, buf []float32, op Op, group []int) error {
	me, err := c.checkGroup(group)
	if err == nil && !op.valid() {
		err = badOp(op)
	}
	m := len(group)
	if err == nil && max(c.segElems, ((len(buf)+m-1)/m+maxSegments-1)/maxSegments) > maxFrameElems {
		err = fmt.Errorf("%w: %d elements is too large", ErrBuffer, len(buf))
	}
	if err != nil {
		return c.abortCall(opGroupAllReduce, err)
	}
	return c.run(ctx, opGroupAllReduce, uint64(len(buf)), groupExtra(op, group), func() error {
		if m == 1 || len(buf) == 0 {
			return nil
		}
		if c.stagingAmong(group) {
			if staged, err := c.stagedReduce(buf, op, group, me); staged {
				return err
			}
		}
		return c.tcpGroupAllReduce(buf, op, group, me)
	})
}

// tcpGroupAllReduce is GroupAllReduce over the data connections.
func (c *Comm) tcpGroupAllReduce(buf []float32, op Op, group []int, me int) error {
	m := len(group)
	lay := layout{count: len(buf), n: m, seg: max(c.segElems, ((len(buf)+m-1)/m+maxSegments-1)/maxSegments)}
	c.ensureScratch(lay.seg)
	if err := c.groupReduceScatter(buf, lay, op, group, me); err != nil {
		return err
	}
	return c.groupGather(buf, lay, group, me)
}

// checkGroup validates a group and returns this rank's index in it.
func (c *Comm) checkGroup(group []int) (int, error) {
	me := -1
	for i, g := range group {
		switch {
		case g < 0 || g >= c.size:
			return 0, fmt.Errorf("%w: group %v: rank %d out of range 0-%d", ErrConfig, group, g, c.size-1)
		case i > 0 && g <= group[i-1]:
			return 0, fmt.Errorf("%w: group %v is not sorted ascending without repeats", ErrConfig, group)
		case g == c.rank:
			me = i
		}
	}
	if me < 0 {
		return 0, fmt.Errorf("%w: group %v does not contain rank %d", ErrConfig, group, c.rank)
	}
	return me, nil
}

// groupExtra is the header's extra field of a GroupAllReduce: the op in
// the low byte and 24 bits of a hash of the group above, so members that
// disagree about the group (but still talk to each other) are out of step.
func groupExtra(op Op, group []int) uint32 {
	h := fnv.New32a()
	var b [4]byte
	for _, g := range group {
		b[0], b[1], b[2], b[3] = byte(g), byte(g>>8), byte(g>>16), byte(g>>24)
		h.Write(b[:])
	}
	return uint32(op) | h.Sum32()<<8
}

// groupReduceScatter sends chunk j of buf to member j for every other
// member, and reduces this member's chunk in place in group order,
// segment by segment, sending each finished segment to every other
// member. As in meshReduceScatter, at most maxSegments contributions and
// maxSegments results are queued per peer, so queuing never blocks.
func (c *Comm) groupReduceScatter(buf []float32, lay layout, op Op, group []int, me int) error {
	m := len(group)
	_, most := lay.chunk(0)
	for k := 0; k < lay.segs(most); k++ {
		for d := 1; d < m; d++ {
			j := (me + d) % m
			o, l := lay.chunk(j)
			if k >= lay.segs(l) {
				continue
			}
			so, sl := lay.segment(l, k)
			if err := c.post(c.peers[group[j]], phaseReduce, o+so, buf[o+so:o+so+sl]); err != nil {
				return err
			}
		}
	}
	o, l := lay.chunk(me)
	for k := 0; k < lay.segs(l); k++ {
		so, sl := lay.segment(l, k)
		seg, tmp := buf[o+so:o+so+sl], c.tmp[:sl]
		if me > 0 {
			// The members before this one come first: reduce them
			// aside, then combine with this member's own values.
			acc := c.acc[:sl]
			if err := c.recv(c.peers[group[0]], phaseReduce, o+so, acc); err != nil {
				return err
			}
			for j := 1; j < me; j++ {
				if err := c.recv(c.peers[group[j]], phaseReduce, o+so, tmp); err != nil {
					return err
				}
				reduceInto(op, acc, tmp)
			}
			reduce3(op, seg, acc, seg)
		}
		for j := me + 1; j < m; j++ {
			if err := c.recv(c.peers[group[j]], phaseReduce, o+so, tmp); err != nil {
				return err
			}
			reduceInto(op, seg, tmp)
		}
		finish(op, seg, m)
		for d := 1; d < m; d++ {
			if err := c.post(c.peers[group[(me+d)%m]], phaseGather, o+so, seg); err != nil {
				return err
			}
		}
	}
	return nil
}

// groupGather receives every other member's reduced chunk into place.
func (c *Comm) groupGather(buf []float32, lay layout, group []int, me int) error {
	for j, g := range group {
		if j == me {
			continue
		}
		o, l := lay.chunk(j)
		for k := 0; k < lay.segs(l); k++ {
			so, sl := lay.segment(l, k)
			if err := c.recv(c.peers[g], phaseGather, o+so, buf[o+so:o+so+sl]); err != nil {
				return err
			}
		}
	}
	return nil
}
