package collective

import (
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
// waiting for a core); between max(Entered, PeerEntered) and Ready the
// peers staged their data and this rank was woken; from Ready to Left it
// read and reduced. PeerEntered and Ready are known only for calls through
// shared memory (staging or Alloc buffers); over TCP they are zero.
type CallTimes struct {
	Entered, PeerEntered, Ready, Left time.Time
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
	return CallTimes{Entered: at(c.cur.entered), PeerEntered: at(c.cur.peerEntered), Ready: at(c.cur.ready), Left: at(c.left)}
}

// sawPeer records that this rank has seen the data of a peer that
// entered the running call at entered (Unix nanoseconds).
func (c *Comm) sawPeer(entered int64) {
	c.cur.peerEntered = max(c.cur.peerEntered, entered)
	c.cur.ready = time.Now().UnixNano()
}

// entryStamp is rank r's word in the control segment that holds when it
// entered the call of its last barrier, after its arrive word.
func (g *shmGroup) entryStamp(r int) *int64 {
	return (*int64)(unsafe.Pointer(&g.ctl[(r+1)*shmSlot+8]))
}

// stampEntry publishes when this rank entered the running call, before it
// arrives at a barrier.
func (c *Comm) stampEntry() { atomic.StoreInt64(c.shm.entryStamp(c.rank), c.cur.entered) }

// sawBarrier records, after the first barrier of a call, when the last
// member of this server entered it.
func (c *Comm) sawBarrier() {
	if c.cur.ready != 0 {
		return
	}
	var last int64
	for _, q := range c.shm.members {
		if q != c.rank {
			last = max(last, atomic.LoadInt64(c.shm.entryStamp(q)))
		}
	}
	c.sawPeer(last)
}
