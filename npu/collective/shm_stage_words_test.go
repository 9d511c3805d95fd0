package collective

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// The call numbers in stage words are compared modulo 2^29 calls
// (stageReached), so numbers far apart must never be compared. These
// tests let the ranks make many calls that stage nothing (as with Alloc
// buffers, TCP, or groups of one) by jumping their call counters (c.seq)
// between real calls: the shared memory is left as those calls leave it.

// unstagedCalls has every rank make n calls that stage nothing: a Barrier
// every 2^25 calls, the calls between them skipped.
func unstagedCalls(t *testing.T, comms []*Comm, n uint32) {
	t.Helper()
	const step = 1 << 25
	for n > 0 {
		k := min(n, step)
		for _, c := range comms {
			c.seq += k - 1
		}
		mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.Barrier(context.Background()) }))
		n -= k
	}
}

// stagedExchangeOnce runs one Exchange on every rank (staged: every rank
// is on one server), rank late entering it after delay, and checks what
// every rank received.
func stagedExchangeOnce(t *testing.T, comms []*Comm, late int, delay time.Duration, seed uint64) {
	t.Helper()
	n := len(comms)
	errs := onAll(comms, func(r int, c *Comm) error {
		send, recv := make([][]float32, n), make([][]float32, n)
		for p := range n {
			send[p], recv[p] = block(seed, r, p, 5+p), make([]float32, 5+r)
		}
		if r == late {
			time.Sleep(delay)
		}
		if err := c.Exchange(context.Background(), send, recv); err != nil {
			return err
		}
		for p := range n {
			if i := sameBits(recv[p], block(seed, p, r, 5+r)); i >= 0 {
				return fmt.Errorf("block from rank %d differs at element %d", p, i)
			}
		}
		return nil
	})
	mustAll(t, errs)
}

// A rank whose stage word last changed 2^28 calls ago: a peer that comes
// to the next staged call first must wait for it, not take the stale word
// for this call's and read its header of a call long gone ("out of step:
// it called exchange #1").
func TestStagedCallAfterManyUnstagedCalls(t *testing.T) {
	dir := shmDir(t)
	comms := group(t, 2, func(c *Config) { c.Transport, c.ShmDir = TransportShm, dir })
	stagedExchangeOnce(t, comms, -1, 0, 1) // call #1
	unstagedCalls(t, comms, 1<<28)
	stagedExchangeOnce(t, comms, 1, 200*time.Millisecond, 2)
}

// A staging half last written 2^28 calls ago, while the other half was
// written every 2^27 calls: the peers' stage words are so far past the
// half's call that they read as behind it, and the next call on that half
// waited for them until the timeout.
func TestStagingHalfIdleForManyCalls(t *testing.T) {
	dir := shmDir(t)
	comms := group(t, 2, func(c *Config) {
		c.Transport, c.ShmDir, c.Timeout = TransportShm, dir, 2*time.Second
	})
	stagedExchangeOnce(t, comms, -1, 0, 1) // call #1: half 1
	stagedExchangeOnce(t, comms, -1, 0, 2) // call #2: half 0
	unstagedCalls(t, comms, 1<<27)
	stagedExchangeOnce(t, comms, -1, 0, 3) // call #2^27+3: half 1
	unstagedCalls(t, comms, 1<<27-1)
	stagedExchangeOnce(t, comms, -1, 0, 4) // call #2^28+3: half 1
	stagedExchangeOnce(t, comms, -1, 0, 5) // call #2^28+4: half 0, last written in call #2
}

// Call numbers wrap from 2^32-1 to 0. A half written in call 0 is written
// again in call 2 only once its reader has said it is done with call 0;
// it once counted call 0 as no call at all and was overwritten at once.
func TestStagingHalfOfCallZeroWaitsForItsReaders(t *testing.T) {
	dir := shmDir(t)
	comms := group(t, 2, func(c *Config) { c.Transport, c.ShmDir = TransportShm, dir })
	writer, reader := comms[0], comms[1]
	reader.cur.seq = ^uint32(0) // the reader is done with call 2^32-1
	reader.publish(stageDone)
	writer.cur.seq = 0
	if _, err := writer.stageBegin([]int{1}); err != nil {
		t.Fatal(err)
	}
	writer.cur.seq = 2
	var readerDone atomic.Bool
	finished := make(chan struct{})
	defer func() { <-finished }() // before Close unmaps the staging
	go func() {
		defer close(finished)
		time.Sleep(100 * time.Millisecond)
		readerDone.Store(true)
		reader.cur.seq = 0
		reader.publish(stageDone)
	}()
	h, err := writer.stageBegin([]int{1})
	if err != nil {
		t.Fatal(err)
	}
	if h != 0 {
		t.Fatalf("call 2 writes half %d, want 0", h)
	}
	if !readerDone.Load() {
		t.Fatal("rank 0 began writing its half of call 0 again in call 2 before rank 1 was done reading it")
	}
}
