package collective

// Exchange, SendRecv and AllGather of ordinary buffers through the staging
// memory of shm_staging.go: a sender copies its blocks for the ranks of its
// server into its half of the call, one after the other, with a table of
// where each starts; each receiver copies its block out. Ranks of other
// servers get theirs over TCP, as without shared memory.

// stagedExchange is Exchange with staging for the ranks of this server.
func (c *Comm) stagedExchange(send, recv [][]float32) error {
	st := c.shm.stg
	r, n := c.rank, c.size
	copy(recv[r], send[r])
	for d := 1; d < n; d++ { // queued first: TCP moves them meanwhile
		if p := (r + d) % n; !c.stagingWith(p) {
			if err := c.postPair(c.peers[p], send[p]); err != nil {
				return err
			}
		}
	}
	peers := c.serverPeers()
	h, err := c.stageBegin(peers)
	if err != nil {
		return err
	}
	total := 0
	for _, p := range peers {
		total += len(send[p])
	}
	fits := c.stageFits(h, total)
	hdr := c.putHeader(h, !fits)
	data, off := st.half(r, h), 0
	for _, p := range peers {
		putEntry(hdr, p, off, len(send[p]))
		if fits {
			copy(data[off:], send[p])
		} else if err := c.postPair(c.peers[p], send[p]); err != nil {
			return err
		}
		off += len(send[p])
	}
	c.publish(stageWritten)
	// Read in the order of TCP: rank r-d first.
	var viaTCPFrom []int
	for d := 1; d < n; d++ {
		p := (r - d + n) % n
		if !c.stagingWith(p) {
			continue
		}
		ph, ok, err := c.awaitWritten(p, h)
		if !ok {
			return err
		}
		if viaTCP(ph) {
			viaTCPFrom = append(viaTCPFrom, p)
			continue
		}
		o, l := entry(ph, r)
		if l != len(recv[p]) {
			return c.fail(&PeerError{Rank: p, Addr: c.cfg.Addrs[p], Via: -1,
				Err: c.lengthMismatch(header{kind: kindData, op: opExchange, phase: phaseLength, seq: c.cur.seq, offset: uint64(l)},
					header{kind: kindData, op: opExchange, phase: phaseLength, seq: c.cur.seq, offset: uint64(len(recv[p]))})})
		}
		copy(recv[p], st.half(p, h)[o:o+l])
	}
	c.publish(stageDone)
	for d := 1; d < n; d++ {
		if p := (r - d + n) % n; !c.stagingWith(p) {
			if err := c.recvPair(c.peers[p], recv[p]); err != nil {
				return err
			}
		}
	}
	for _, p := range viaTCPFrom {
		if err := c.recvPair(c.peers[p], recv[p]); err != nil {
			return err
		}
	}
	return nil
}

// stagedAllGather is AllGather into recv, which already holds this rank's
// block of b elements, when every rank is on this server: every rank
// stages its block once and copies every other rank's.
func (c *Comm) stagedAllGather(recv []float32, b int) error {
	st := c.shm.stg
	c.announceTCP() // not in a barrier of the Alloc path
	peers := c.serverPeers()
	h, err := c.stageBegin(peers)
	if err != nil {
		return err
	}
	own := recv[c.rank*b : (c.rank+1)*b]
	fits := c.stageFits(h, b)
	c.putHeader(h, !fits)
	if fits {
		copy(st.half(c.rank, h), own)
	} else {
		for _, p := range peers {
			if err := c.postPair(c.peers[p], own); err != nil {
				return err
			}
		}
	}
	c.publish(stageWritten)
	var viaTCPFrom []int
	for d := 1; d < c.size; d++ {
		p := (c.rank - d + c.size) % c.size
		ph, ok, err := c.awaitWritten(p, h)
		if !ok {
			return err
		}
		if viaTCP(ph) {
			viaTCPFrom = append(viaTCPFrom, p)
			continue
		}
		copy(recv[p*b:(p+1)*b], st.half(p, h)[:b])
	}
	c.publish(stageDone)
	for _, p := range viaTCPFrom {
		if err := c.recvPair(c.peers[p], recv[p*b:(p+1)*b]); err != nil {
			return err
		}
	}
	return nil
}
