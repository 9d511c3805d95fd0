package collective

import (
	"encoding/binary"
	"sync/atomic"
	"time"
	"unsafe"
)

// CallTimes says where this rank's last collective call spent its time,
// as wall-clock instants (comparable between the processes of one host):
// a profile of the oversubscribed machine apart from the data moving.
//
// Between Entered and PeerEntered the rank waited for the slowest peer it
// needed to reach the call (arrival skew: the peer was still computing, or
// waiting for a core); until PeerStaged for the last of them to stage its
// data (or reach the barrier); until Ready for this rank to notice, which
// on a machine with more ranks than cores is mostly waiting for a core
// after the wake-up; from Ready to Left it read and reduced. The peer
// times are known only for calls through shared memory (staging or Alloc
// buffers); over TCP they are zero.
type CallTimes struct {
	Entered, PeerEntered, PeerStaged, Ready, Left time.Time
}

// LastCall returns the times of this rank's last collective call. Call it
// from the goroutine that made the call, after the call returned.
func (c *Comm) LastCall() CallTimes {
	at := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	return CallTimes{Entered: at(c.cur.entered), PeerEntered: at(c.cur.peerEntered), PeerStaged: at(c.cur.peerStaged),
		Ready: at(c.cur.ready), Left: at(c.left)}
}

// stampStaged records in this rank's header of the running call when its
// data was staged, just before it publishes that.
func (c *Comm) stampStaged() {
	h := c.shm.stg.header(c.rank, int(c.cur.seq&1))
	binary.LittleEndian.PutUint64(h[hdrStaged:], uint64(time.Now().UnixNano()))
}

// sawPeer records that this rank has seen the data of a peer that
// entered the running call at entered (Unix nanoseconds).
func (c *Comm) sawPeer(entered, staged int64) {
	c.cur.peerEntered = max(c.cur.peerEntered, entered)
	c.cur.peerStaged = max(c.cur.peerStaged, staged)
	c.cur.ready = time.Now().UnixNano()
}

// entryStamp and arrivalStamp are rank r's words in the control segment,
// after its arrive word, that hold when it entered the call of its last
// barrier and when it arrived there.
func (g *shmGroup) entryStamp(r int) *int64 {
	return (*int64)(unsafe.Pointer(&g.ctl[(r+1)*shmSlot+8]))
}

func (g *shmGroup) arrivalStamp(r int) *int64 {
	return (*int64)(unsafe.Pointer(&g.ctl[(r+1)*shmSlot+16]))
}

// stampEntry publishes when this rank entered the running call and when
// it arrives at the call's first barrier. Only the first: the peers read
// the stamps once past that barrier (sawBarrier), when this rank may
// already be at the next barrier of the call, and its arrival there is
// not when its data was ready. (It cannot be in the next call's first
// barrier: every call with barriers has a second one.)
func (c *Comm) stampEntry() {
	if c.cur.stamped {
		return
	}
	c.cur.stamped = true
	atomic.StoreInt64(c.shm.entryStamp(c.rank), c.cur.entered)
	atomic.StoreInt64(c.shm.arrivalStamp(c.rank), time.Now().UnixNano())
}

// sawBarrier records, after the first barrier of a call, when the last
// member of this server entered it.
func (c *Comm) sawBarrier() {
	if c.cur.ready != 0 {
		return
	}
	var entered, arrived int64
	for _, q := range c.shm.members {
		if q != c.rank {
			entered = max(entered, atomic.LoadInt64(c.shm.entryStamp(q)))
			arrived = max(arrived, atomic.LoadInt64(c.shm.arrivalStamp(q)))
		}
	}
	c.sawPeer(entered, arrived)
}
