package collective

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func closeAll(comms []*Comm) {
	for _, c := range comms {
		if c != nil {
			c.Close()
		}
	}
}

// A rank that closes its communicator in the middle of a collective fails
// every other rank with an error naming it, and nothing hangs or leaks.
func TestCloseDuringCollectiveFailsEveryRank(t *testing.T) {
	for _, alg := range []Algorithm{Mesh, Ring} {
		t.Run(alg.String(), func(t *testing.T) {
			base := runtime.NumGoroutine()
			const n, quitter = 4, 2
			timeout := 5 * time.Second
			comms, errs := initAll(configs(t, n, func(c *Config) { c.Algorithm, c.Timeout = alg, timeout }))
			mustAll(t, errs)
			start := time.Now()
			errs = onAll(comms, func(r int, c *Comm) error {
				buf := make([]float32, 1<<20)
				for i := 0; i < 10000; i++ {
					if r == quitter && i == 3 {
						go c.Close() // while this rank's next call runs
					}
					if err := c.AllReduce(context.Background(), buf, Sum); err != nil {
						return err
					}
				}
				return errors.New("no failure after 10000 calls")
			})
			if elapsed := time.Since(start); elapsed > timeout {
				t.Errorf("failures took %v, more than the %v timeout", elapsed, timeout)
			}
			for r, err := range errs {
				if r == quitter {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("rank %d (closed): %v, want ErrClosed", r, err)
					}
					continue
				}
				// The news reaches a rank inside a call (a PeerError) or,
				// if it had just finished one, before the next (ErrBroken
				// wrapping the PeerError); both name rank 2.
				wantPeer(t, fmt.Sprintf("rank %d", r), err, quitter, ErrPeerLeft)
				if !strings.HasPrefix(err.Error(), "collective: allreduce: ") {
					t.Errorf("rank %d: %q does not start with the collective", r, err)
				}
			}
			// Broken: later calls fail at once, still naming the cause.
			t0 := time.Now()
			err := comms[0].Barrier(context.Background())
			if !errors.Is(err, ErrBroken) || time.Since(t0) > 100*time.Millisecond {
				t.Errorf("barrier after failure: %v after %v, want ErrBroken at once", err, time.Since(t0))
			}
			wantPeer(t, "barrier after failure", err, quitter, ErrPeerLeft)
			if !strings.HasPrefix(err.Error(), "collective: barrier: communicator broken by an earlier failure") {
				t.Errorf("barrier after failure: %q", err)
			}
			closeAll(comms)
			checkNoLeak(t, base)
		})
	}
}

// A rank that never enters a collective is named by every other rank, also
// by ranks that were waiting on someone else: heartbeats tell each rank
// whom its peers wait for.
func TestHangingRankNamedByEveryRank(t *testing.T) {
	for _, alg := range []Algorithm{Mesh, Ring} {
		t.Run(alg.String(), func(t *testing.T) {
			base := runtime.NumGoroutine()
			const n, hanging = 4, 1
			timeout := time.Second
			if raceEnabled {
				timeout = 3 * time.Second // heartbeats of a race-instrumented process can be late
			}
			comms, errs := initAll(configs(t, n, func(c *Config) { c.Algorithm, c.Timeout = alg, timeout }))
			mustAll(t, errs)
			released := make(chan struct{})
			start := time.Now()
			var elapsed [n]time.Duration
			errs = onAll(comms, func(r int, c *Comm) error {
				buf := make([]float32, 100_000)
				if r == hanging {
					<-released
				}
				err := c.AllReduce(context.Background(), buf, Sum)
				elapsed[r] = time.Since(start)
				if r != hanging && r == n-1 {
					close(released)
				}
				return err
			})
			for r, err := range errs {
				if r == hanging {
					// It learns from the others that it was too late: a
					// PeerError naming itself, or ErrBroken wrapping one,
					// depending on whether the news came before its call.
					wantPeer(t, "hanging rank", err, hanging, ErrPeerTimeout)
					continue
				}
				wantPeer(t, fmt.Sprintf("rank %d", r), err, hanging, ErrPeerTimeout)
				if !strings.Contains(err.Error(), "did not answer within "+timeout.String()) {
					t.Errorf("rank %d: %q does not say how long it waited", r, err)
				}
				// Not before the timeout (it must wait for the peer); the
				// upper bound only tells a hang from a slow machine, so it
				// is far off: a loaded 2-core machine took 3x the timeout.
				if elapsed[r] < timeout || elapsed[r] > 15*timeout {
					t.Errorf("rank %d failed after %v, want it after the %v timeout, not a hang", r, elapsed[r], timeout)
				}
			}
			closeAll(comms)
			checkNoLeak(t, base)
		})
	}
}

// Canceling one rank's context aborts the collective on every rank.
func TestCanceledContextAbortsEveryRank(t *testing.T) {
	const n = 3
	comms := group(t, n, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	errs := onAll(comms, func(r int, c *Comm) error {
		buf := make([]float32, 1000)
		switch r {
		case 0:
			return c.AllReduce(ctx, buf, Sum)
		case 1:
			return c.AllReduce(context.Background(), buf, Sum)
		}
		time.Sleep(300 * time.Millisecond) // rank 2 comes late and finds the communicator broken
		return c.AllReduce(context.Background(), buf, Sum)
	})
	if !errors.Is(errs[0], context.Canceled) || errs[0].Error() != "collective: allreduce: context canceled" {
		t.Errorf("rank 0: %v, want context.Canceled", errs[0])
	}
	wantPeer(t, "rank 1", errs[1], 0, ErrPeerAborted)
	if !strings.Contains(errs[1].Error(), "aborted: context canceled") {
		t.Errorf("rank 1: %q does not say why rank 0 aborted", errs[1])
	}
	if !errors.Is(errs[2], ErrBroken) || !errors.Is(errs[2], ErrPeerAborted) {
		t.Errorf("rank 2: %v, want ErrBroken caused by rank 0 aborting", errs[2])
	}
}

// Ranks that call different collectives, or the same one with different
// lengths or reduce ops, find out from the first frame and say so. Either
// rank may be the first to notice; both report both calls.
func TestMismatchedCallsAreOutOfStep(t *testing.T) {
	type call func(c *Comm) error
	ctx := context.Background()
	allreduce := func(count int, op Op) call {
		return func(c *Comm) error { return c.AllReduce(ctx, make([]float32, count), op) }
	}
	broadcast := func(c *Comm) error { return c.Broadcast(ctx, make([]float32, 100), 0) }
	for _, tc := range []struct {
		name  string
		calls [2]call
		call0 string // how rank 0's call is described
		call1 string
	}{
		{"length", [2]call{allreduce(100, Sum), allreduce(104, Sum)}, "allreduce #1 of 100 elements (sum)", "allreduce #1 of 104 elements (sum)"},
		{"op", [2]call{allreduce(100, Sum), allreduce(100, Max)}, "allreduce #1 of 100 elements (sum)", "allreduce #1 of 100 elements (max)"},
		{"collective", [2]call{allreduce(100, Sum), broadcast}, "allreduce #1 of 100 elements (sum)", "broadcast #1 of 100 elements (root 0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := group(t, 2, nil)
			errs := onAll(comms, func(r int, c *Comm) error { return tc.calls[r](c) })
			for r, err := range errs {
				var pe *PeerError
				if !errors.As(err, &pe) || !errors.Is(err, ErrOutOfStep) {
					t.Fatalf("rank %d: %v, want a PeerError with ErrOutOfStep", r, err)
				}
				var want string
				if pe.Rank == 0 {
					want = "rank 0 (" + pe.Addr + ") is out of step: it called " + tc.call0 + ", rank 1 called " + tc.call1
				} else {
					want = "rank 1 (" + pe.Addr + ") is out of step: it called " + tc.call1 + ", rank 0 called " + tc.call0
				}
				if !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: %q does not contain %q", r, err, want)
				}
			}
		})
	}
}

// A rank that cannot take part because of its arguments tells the others
// why, instead of letting them time out.
func TestBadArgumentsReachThePeers(t *testing.T) {
	comms := group(t, 2, nil)
	errs := onAll(comms, func(r int, c *Comm) error {
		recv := make([]float32, 8)
		if r == 0 {
			recv = recv[:7]
		}
		return c.AllGather(context.Background(), make([]float32, 4), recv)
	})
	if !errors.Is(errs[0], ErrBuffer) || !strings.Contains(errs[0].Error(), "recv has 7 elements, want 2 ranks × send's 4") {
		t.Errorf("rank 0: %v, want ErrBuffer", errs[0])
	}
	wantPeer(t, "rank 1", errs[1], 0, ErrPeerAborted)
	if !strings.Contains(errs[1].Error(), "aborted: invalid buffer length: recv has 7 elements") {
		t.Errorf("rank 1: %q does not carry rank 0's reason", errs[1])
	}
}

func TestArgumentErrors(t *testing.T) {
	ctx := context.Background()
	buf := make([]float32, 12)
	for _, tc := range []struct {
		name string
		call func(c *Comm) error
		want string
	}{
		{"op", func(c *Comm) error { return c.AllReduce(ctx, buf, Op(9)) }, "unknown reduce op 9"},
		{"reducescatter length", func(c *Comm) error { return c.ReduceScatter(ctx, buf, make([]float32, 5), Sum) }, "send has 12 elements, want 2 ranks × recv's 5"},
		{"reducescatter overlap", func(c *Comm) error { return c.ReduceScatter(ctx, buf, buf[:6], Sum) }, "send and recv overlap"},
		{"allgather overlap", func(c *Comm) error { return c.AllGather(ctx, buf[1:7], buf) }, "send overlaps recv"},
		{"broadcast root", func(c *Comm) error { return c.Broadcast(ctx, buf, 2) }, "root 2 out of range 0-1"},
		{"alltoall length", func(c *Comm) error { return c.AllToAll(ctx, buf, buf[:11:11]) }, "want equal multiples of 2 ranks"},
		{"alltoall overlap", func(c *Comm) error { return c.AllToAll(ctx, buf, buf) }, "send and recv overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := group(t, 2, nil)
			err := tc.call(comms[0])
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(comms[0].Barrier(ctx), ErrBroken) {
				t.Fatal("communicator usable after a failed call")
			}
		})
	}
}

// Collectives are serialized per communicator; a concurrent call is an
// error, not a silent reordering.
func TestConcurrentCallIsRefused(t *testing.T) {
	comms := group(t, 2, nil)
	done := make(chan error, 1)
	go func() { done <- comms[0].AllReduce(context.Background(), make([]float32, 10), Sum) }()
	deadline := time.Now().Add(5 * time.Second)
	for comms[0].curOp.Load() < 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := comms[0].Barrier(context.Background()); !errors.Is(err, ErrBusy) {
		t.Errorf("concurrent barrier: %v, want ErrBusy", err)
	}
	comms[0].Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("allreduce interrupted by close: %v, want ErrClosed", err)
	}
	if err := comms[0].AllReduce(context.Background(), make([]float32, 10), Sum); !errors.Is(err, ErrClosed) || errors.Is(err, ErrBroken) {
		t.Errorf("call after close: %v, want ErrClosed", err)
	}
}

// The portable path (byte-swapping through scratch buffers, used on
// big-endian hosts) gives the same results as the zero-copy path.
func TestPortableWirePath(t *testing.T) {
	const n, count = 3, 5000
	comms := group(t, n, smallSegments(Mesh))
	for _, c := range comms {
		c.zeroCopy = false
	}
	xs := inputs(n, count, Sum, 9)
	want := rankOrderRef(xs, Sum)
	mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.AllReduce(context.Background(), xs[r], Sum) }))
	for r := range xs {
		if i := sameBits(xs[r], want); i >= 0 {
			t.Fatalf("rank %d: element %d differs", r, i)
		}
	}
}
