package collective

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// shmDir returns a fresh directory for shared-memory files: on tmpfs
// when the host has /dev/shm, as in production.
func shmDir(t *testing.T) string {
	t.Helper()
	if !shmSupported {
		t.Skip("no shared-memory transport on this platform")
	}
	dir, err := os.MkdirTemp(DefaultShmDir, "mspipe-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// shmGroupOf starts an n-rank job that must use shared memory in dir.
func shmGroupOf(t *testing.T, n int, dir string) []*Comm {
	t.Helper()
	comms := group(t, n, func(c *Config) { c.Transport = TransportShm; c.ShmDir = dir })
	for r, c := range comms {
		if n > 1 && c.Transport() != TransportShm {
			t.Fatalf("rank %d uses %v, want shm", r, c.Transport())
		}
	}
	return comms
}

func allocAll(t *testing.T, comms []*Comm, count int) [][]float32 {
	t.Helper()
	bufs := make([][]float32, len(comms))
	mustAll(t, onAll(comms, func(r int, c *Comm) error {
		var err error
		bufs[r], err = c.Alloc(context.Background(), count)
		return err
	}))
	return bufs
}

// AllReduce over shared memory gives the bits of the rank-order reference
// (the Mesh order over TCP) for every op, for lengths around the vector
// block and for slices that start at unaligned offsets of the buffer.
func TestShmAllReduceMatchesRankOrder(t *testing.T) {
	ops := []Op{Sum, Mean, Max, Min, Prod}
	for _, n := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			dir := shmDir(t)
			comms := shmGroupOf(t, n, dir)
			const total = 20011 + 64
			bufs := allocAll(t, comms, total)
			for _, count := range []int{1, 7, 63, 64, 65, 8*64 + 5, 20011} {
				for _, start := range []int{0, 3, 64} {
					for _, op := range ops {
						xs := inputs(n, count, op, uint64(count+start))
						want := rankOrderRef(xs, op)
						for r := range bufs {
							copy(bufs[r][start:], xs[r])
						}
						mustAll(t, onAll(comms, func(r int, c *Comm) error {
							return c.AllReduce(context.Background(), bufs[r][start:start+count], op)
						}))
						for r := range bufs {
							if i := sameBits(bufs[r][start:start+count], want); i >= 0 {
								t.Fatalf("count %d at %d, %v, rank %d: element %d = %v, reference %v",
									count, start, op, r, i, bufs[r][start+i], want[i])
							}
						}
					}
				}
			}
			if n > 1 {
				if left, _ := os.ReadDir(dir); len(left) != 0 {
					t.Errorf("files left in %s while the job runs: %v", dir, left)
				}
			}
		})
	}
}

// Ordinary buffers still go over TCP on a shared-memory communicator, and
// the two paths agree bit for bit.
func TestShmAndTCPAgree(t *testing.T) {
	const n, count = 4, 100_003
	comms := shmGroupOf(t, n, shmDir(t))
	shared := allocAll(t, comms, count)
	heap := make([][]float32, n)
	for r := range heap {
		fill(shared[r], 5, r, Sum)
		heap[r] = slices.Clone(shared[r])
	}
	mustAll(t, onAll(comms, func(r int, c *Comm) error {
		if err := c.AllReduce(context.Background(), shared[r], Mean); err != nil {
			return err
		}
		return c.AllReduce(context.Background(), heap[r], Mean)
	}))
	for r := range heap {
		if i := sameBits(shared[r], heap[r]); i >= 0 {
			t.Fatalf("rank %d: element %d: shm %v, tcp %v", r, i, shared[r][i], heap[r][i])
		}
	}
}

// Ranks that disagree about the call are reported as out of step, with
// both calls, on every rank, which all name the same culprit.
func TestShmMismatchIsOutOfStep(t *testing.T) {
	comms := shmGroupOf(t, 2, shmDir(t))
	bufs := allocAll(t, comms, 256)
	errs := onAll(comms, func(r int, c *Comm) error {
		return c.AllReduce(context.Background(), bufs[r][:128+r], Sum)
	})
	want := "rank 1 (" + comms[0].cfg.Addrs[1] + ") is out of step: it called allreduce #2 of 129 elements (sum) on shared buffer 0 at element 0, " +
		"rank 0 called allreduce #2 of 128 elements (sum) on shared buffer 0 at element 0"
	for r, err := range errs {
		if !errors.Is(err, ErrOutOfStep) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want ...%s", r, err, want)
		}
	}
}

// Alloc with different counts on different ranks fails on every rank.
func TestShmAllocMismatch(t *testing.T) {
	comms := shmGroupOf(t, 3, shmDir(t))
	errs := onAll(comms, func(r int, c *Comm) error {
		_, err := c.Alloc(context.Background(), 100+r/2)
		return err
	})
	for r, err := range errs {
		if !errors.Is(err, ErrOutOfStep) || !strings.Contains(err.Error(), "rank 2 ("+comms[0].cfg.Addrs[2]+") is out of step: it called alloc #1 of 101 elements, rank 0 called alloc #1 of 100 elements") {
			t.Errorf("rank %d: %v, want rank 2 out of step", r, err)
		}
	}
}

// A buffer from Alloc keeps its contents and stays usable after Close.
func TestShmBufferOutlivesClose(t *testing.T) {
	comms := shmGroupOf(t, 2, shmDir(t))
	bufs := allocAll(t, comms, 5000)
	for r := range bufs {
		for i := range bufs[r] {
			bufs[r][i] = float32(i + r)
		}
	}
	mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.AllReduce(context.Background(), bufs[r], Sum) }))
	for _, c := range comms {
		c.Close()
	}
	for r := range bufs {
		for i, v := range bufs[r] {
			if v != float32(2*i+1) {
				t.Fatalf("rank %d element %d = %v after Close, want %v", r, i, v, 2*i+1)
			}
		}
		bufs[r][0] = 42 // still writable
	}
}

// With TransportTCP, or a directory a rank cannot use, Alloc returns
// ordinary memory and everything goes over TCP; TransportShm then fails
// Init and says why.
func TestShmFallbackAndRequirement(t *testing.T) {
	comms := group(t, 2, func(c *Config) { c.Transport = TransportTCP; c.ShmDir = shmDir(t) })
	if got := comms[0].Transport(); got != TransportTCP {
		t.Fatalf("transport %v, want tcp", got)
	}
	missing := t.TempDir() + "/does-not-exist"
	comms = group(t, 2, func(c *Config) { c.ShmDir = missing })
	if got := comms[1].Transport(); got != TransportTCP {
		t.Fatalf("auto with an unusable directory: transport %v, want tcp", got)
	}
	bufs := allocAll(t, comms, 10)
	bufs[0][0], bufs[1][0] = 1, 2
	mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.AllReduce(context.Background(), bufs[r], Sum) }))
	if bufs[0][0] != 3 || bufs[1][0] != 3 {
		t.Fatalf("tcp fallback reduced to %v, %v, want 3", bufs[0][0], bufs[1][0])
	}

	_, errs := initAll(configs(t, 2, func(c *Config) { c.Transport = TransportShm; c.ShmDir = missing }))
	for r, err := range errs {
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "shared memory transport required, but rank(s) 0, 1 cannot map") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Auto uses shared memory only for ranks on one server of the rank table:
// a two-server job simulated on one machine talks TCP, unless shared
// memory is required.
func TestShmOnlyWithinOneServer(t *testing.T) {
	dir := shmDir(t)
	twoServers := func(c *Config) { c.ShmDir, c.Hosts = dir, []int{0, 0, 1, 1} }
	if got := group(t, 4, twoServers)[0].Transport(); got != TransportTCP {
		t.Errorf("two servers, auto: transport %v, want tcp", got)
	}
	oneServer := func(c *Config) { c.ShmDir, c.Hosts = dir, []int{1, 1, 1, 1} }
	if got := group(t, 4, oneServer)[0].Transport(); got != TransportShm {
		t.Errorf("one server, auto: transport %v, want shm", got)
	}
	forced := func(c *Config) { twoServers(c); c.Transport = TransportShm }
	if got := group(t, 4, forced)[0].Transport(); got != TransportShm {
		t.Errorf("two servers, shm required: transport %v, want shm", got)
	}
}

// A rank that reduces ordinary memory (TCP) while the others reduce shared
// memory is out of step at once, not after the timeout: the barrier sees
// its call.
func TestShmMixedWithTCPIsOutOfStep(t *testing.T) {
	comms := shmGroupOf(t, 3, shmDir(t))
	shared := allocAll(t, comms, 64)
	errs := onAll(comms, func(r int, c *Comm) error {
		buf := shared[r]
		if r == 2 {
			buf = make([]float32, 64)
		}
		return c.AllReduce(context.Background(), buf, Sum)
	})
	want := "rank 2 (" + comms[0].cfg.Addrs[2] + ") is out of step: it called allreduce #2 of 64 elements (sum) on ordinary memory"
	for r, err := range errs {
		if !errors.Is(err, ErrOutOfStep) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want ...%s", r, err, want)
		}
	}
}
