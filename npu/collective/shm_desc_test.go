package collective

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// A rank reads a peer's call descriptor while the peer may already be
// announcing its next call (checkPeerCall does, from a staged wait). The
// read must give one call, never the number of one and the fields of the
// next: that mix once failed a training job as "rank 5 is out of step: it
// called groupallreduce #197 of 1024 elements" when rank 5 had called an
// exchange #197 and then a GroupAllReduce #198.
func TestShmDescriptorReadIsNeverTorn(t *testing.T) {
	g := &shmGroup{ctl: make([]byte, 2*shmSlot)}
	// Call k is an Exchange of k elements when k is odd, a GroupAllReduce
	// of 2k elements when it is even: any mix of two calls shows.
	call := func(k uint64) shmDesc {
		if k%2 == 1 {
			return shmDesc{seq: k, op: uint64(opExchange), count: k, region: noRegion, extra: 0}
		}
		return shmDesc{seq: k, op: uint64(opGroupAllReduce), count: 2 * k, region: noRegion, extra: k}
	}
	g.announce(0, call(1))
	const calls = 2_000_000
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		for k := uint64(2); k <= calls; k++ {
			g.announce(0, call(k))
			if k%1024 == 0 {
				runtime.Gosched()
			}
		}
	}()
	var reads, torn, unread int
	var first shmDesc
	for !done.Load() {
		d := g.load(0)
		reads++
		switch {
		case d.seq == descBusy:
			unread++
		case d != call(d.seq):
			if torn == 0 {
				first = d
			}
			torn++
		}
	}
	wg.Wait()
	if torn > 0 {
		t.Fatalf("%d of %d reads mixed two calls, the first %+v", torn, reads, first)
	}
	if unread == reads {
		t.Fatalf("none of %d reads gave a call", reads)
	}
	t.Logf("%d reads, %d while a call was being announced", reads, unread)
}
