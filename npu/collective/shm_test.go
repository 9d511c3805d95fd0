package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
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

// AllReduce calls of many pieces, one after another on the same ranks:
// every piece of every call is reduced once, whoever claims it, whatever
// the pieces of the call before (the claim counter carries over), and
// the result has the rank-order bits. Slices start off a piece boundary
// and end inside one; small calls (stageDirectMax elements at most) take
// the staged path between the others and leave the counter alone.
func TestShmAllReduceClaimsEveryPiece(t *testing.T) {
	for _, n := range []int{3, 8} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			comms := shmGroupOf(t, n, shmDir(t))
			const total = 3*shmKernelPiece + 200
			bufs := allocAll(t, comms, total)
			calls := []struct{ start, count int }{
				{0, total}, {5, 2*shmKernelPiece + 3}, {shmKernelPiece - 1, 2}, {0, 1},
				{64, 8 * 64}, {shmKernelPiece, shmKernelPiece}, {3, 100}, {7, total - 7},
			}
			for i, call := range calls {
				for _, op := range []Op{Sum, Mean, Max} {
					xs := inputs(n, call.count, op, uint64(10*i+int(op)))
					want := rankOrderRef(xs, op)
					for r := range bufs {
						copy(bufs[r][call.start:], xs[r])
					}
					mustAll(t, onAll(comms, func(r int, c *Comm) error {
						return c.AllReduce(context.Background(), bufs[r][call.start:call.start+call.count], op)
					}))
					for r := range bufs {
						if j := sameBits(bufs[r][call.start:call.start+call.count], want); j >= 0 {
							t.Fatalf("call %d (%d at %d), %v, rank %d: element %d = %v, reference %v",
								i, call.count, call.start, op, r, j, bufs[r][call.start+j], want[j])
						}
					}
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
// both calls, on every rank: in the barrier of a large buffer, where all
// name the same culprit, and in the staging of a small one, where each
// may name the other (as for staged ordinary buffers).
func TestShmMismatchIsOutOfStep(t *testing.T) {
	for _, count := range []int{stageDirectMax + 128, 128} {
		comms := shmGroupOf(t, 2, shmDir(t))
		bufs := allocAll(t, comms, 2*stageDirectMax)
		errs := onAll(comms, func(r int, c *Comm) error {
			return c.AllReduce(context.Background(), bufs[r][:count+r], Sum)
		})
		var wants []string
		if count > stageDirectMax {
			wants = []string{fmt.Sprintf("rank 1 (%s) is out of step: it called allreduce #2 of %d elements (sum) on shared buffer 0 at element 0, "+
				"rank 0 called allreduce #2 of %d elements (sum) on shared buffer 0 at element 0", comms[0].cfg.Addrs[1], count+1, count)}
		} else {
			wants = []string{fmt.Sprintf("allreduce #2 of %d elements (sum)", count+1), fmt.Sprintf("allreduce #2 of %d elements (sum)", count)}
		}
		for r, err := range errs {
			for _, want := range wants {
				if !errors.Is(err, ErrOutOfStep) || !strings.Contains(err.Error(), want) {
					t.Errorf("%d elements, rank %d: %v, want ...%s", count, r, err, want)
				}
			}
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

// Ranks on several servers share memory within each server and combine
// their servers' partial results over TCP: AllReduce gives, bit for bit, a
// reduction over servers (in server order) of reductions over each
// server's ranks (in rank order). Servers with different numbers of ranks
// talk TCP only.
func TestShmAcrossServers(t *testing.T) {
	for _, hosts := range [][]int{{0, 0, 1, 1}, {0, 0, 0, 0, 1, 1, 1, 1}, {2, 2, 0, 0, 1, 1}} {
		t.Run(fmt.Sprint(hosts), func(t *testing.T) {
			n := len(hosts)
			dir := shmDir(t)
			comms := group(t, n, func(c *Config) { c.ShmDir, c.Hosts = dir, hosts })
			for r, c := range comms {
				if c.Transport() != TransportShm || c.shm.flat() {
					t.Fatalf("rank %d: transport %v, flat %v; want shared memory per server", r, c.Transport(), c.shm.flat())
				}
			}
			servers := slices.Compact(slices.Sorted(slices.Values(hosts)))
			const count = 20011
			bufs := allocAll(t, comms, count)
			for _, op := range []Op{Sum, Mean, Max, Min, Prod} {
				xs := inputs(n, count, op, 17)
				for r := range bufs {
					copy(bufs[r], xs[r])
				}
				mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.AllReduce(context.Background(), bufs[r], op) }))
				partial := op
				if op == Mean {
					partial = Sum
				}
				for i := 0; i < count; i++ {
					var total float32
					for si, h := range servers {
						var sub float32
						first := true
						for r := range n {
							if hosts[r] != h {
								continue
							}
							if first {
								sub, first = xs[r][i], false
							} else {
								sub = combine(partial, sub, xs[r][i])
							}
						}
						if si == 0 {
							total = sub
						} else {
							total = combine(partial, total, sub)
						}
					}
					if op == Mean {
						total /= float32(n)
					}
					for r := range bufs {
						if math.Float32bits(bufs[r][i]) != math.Float32bits(total) {
							t.Fatalf("%v rank %d element %d = %v, want %v", op, r, i, bufs[r][i], total)
						}
					}
				}
			}
		})
	}
	uneven := group(t, 3, func(c *Config) { c.ShmDir, c.Hosts = shmDir(t), []int{0, 0, 1} })
	if got := uneven[0].Transport(); got != TransportTCP {
		t.Errorf("servers of 2 and 1 ranks: transport %v, want tcp", got)
	}
}

// A rank that reduces ordinary memory (TCP) while the others reduce shared
// memory is out of step at once, not after the timeout: the barrier sees
// its call. (A buffer too large for the staged path of small ones, which
// takes both kinds of memory.)
func TestShmMixedWithTCPIsOutOfStep(t *testing.T) {
	const count = stageDirectMax + 64
	comms := shmGroupOf(t, 3, shmDir(t))
	shared := allocAll(t, comms, count)
	errs := onAll(comms, func(r int, c *Comm) error {
		buf := shared[r]
		if r == 2 {
			buf = make([]float32, count)
		}
		return c.AllReduce(context.Background(), buf, Sum)
	})
	want := fmt.Sprintf("rank 2 (%s) is out of step: it called allreduce #2 of %d elements (sum) on ordinary memory", comms[0].cfg.Addrs[2], count)
	for r, err := range errs {
		if !errors.Is(err, ErrOutOfStep) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want ...%s", r, err, want)
		}
	}
}

// A rank that cannot get its shared buffer (here: its file name is taken)
// makes every rank fall back to ordinary memory under TransportAuto, and
// fails every rank, saying which could not, when shared memory is
// required.
func TestShmAllocFallsBackTogether(t *testing.T) {
	for _, required := range []bool{false, true} {
		dir := shmDir(t)
		comms := group(t, 3, func(c *Config) {
			c.ShmDir = dir
			if required {
				c.Transport = TransportShm
			}
		})
		g := comms[1].shm
		taken := filepath.Join(dir, fmt.Sprintf("mspipe-%s-r1-b0", g.tag))
		if err := os.WriteFile(taken, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		bufs := make([][]float32, 3)
		errs := onAll(comms, func(r int, c *Comm) error {
			var err error
			bufs[r], err = c.Alloc(context.Background(), 1000)
			return err
		})
		for r, err := range errs {
			switch {
			case required && (err == nil || !strings.Contains(err.Error(), "alloc 1000 elements of shared memory: rank(s) 1 could not")):
				t.Errorf("required, rank %d: %v, want an error naming rank 1", r, err)
			case !required && err != nil:
				t.Errorf("auto, rank %d: %v", r, err)
			case !required && (len(bufs[r]) != 1000 || comms[r].IsShared(bufs[r])):
				t.Errorf("auto, rank %d: %d elements, shared %v; want 1000 of ordinary memory", r, len(bufs[r]), comms[r].IsShared(bufs[r]))
			}
		}
		if !required {
			bufs[0][999], bufs[1][999], bufs[2][999] = 1, 2, 3
			mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.AllReduce(context.Background(), bufs[r], Sum) }))
			if bufs[2][999] != 6 {
				t.Errorf("reduced over TCP to %v, want 6", bufs[2][999])
			}
		}
		os.Remove(taken)
		if left, _ := filepath.Glob(filepath.Join(dir, "mspipe-*")); len(left) != 0 {
			t.Errorf("files left: %v", left)
		}
	}
}

// Two communicators of the same job (secret and addresses) alive at once
// never share a buffer: each has its own segment nonce.
func TestShmSameJobTwiceKeepsBuffersApart(t *testing.T) {
	dir := shmDir(t)
	first := configs(t, 2, func(c *Config) { c.Transport = TransportShm; c.ShmDir = dir })
	addrs := first[0].Addrs
	a, errs := initAll(first)
	mustAll(t, errs)
	defer func() {
		for _, c := range a {
			c.Close()
		}
	}()
	// The same addresses again, now that a's listeners are closed.
	second := make([]Config, 2)
	for r := range second {
		ln, err := net.Listen("tcp", addrs[r])
		if err != nil {
			t.Skipf("address %s not free again: %v", addrs[r], err)
		}
		second[r] = first[r]
		second[r].Listener = ln
	}
	b, errs := initAll(second)
	mustAll(t, errs)
	defer func() {
		for _, c := range b {
			c.Close()
		}
	}()
	// Their buffers' file names differ, so no interleaving of their Allocs
	// can make one map the other's.
	if a[0].shm.tag == b[0].shm.tag {
		t.Fatalf("both communicators name their buffers mspipe-%s-*", a[0].shm.tag)
	}
	alloc := func(comms []*Comm) [][]float32 { return allocAll(t, comms, 1024) }
	a0, b0, a1 := alloc(a), alloc(b), alloc(a)
	for r := range 2 {
		for i := range 1024 {
			a0[r][i], b0[r][i], a1[r][i] = float32(r+1), float32(10*(r+1)), float32(100*(r+1))
		}
	}
	mustAll(t, onAll(a, func(r int, c *Comm) error { return c.AllReduce(context.Background(), a1[r], Sum) }))
	mustAll(t, onAll(b, func(r int, c *Comm) error { return c.AllReduce(context.Background(), b0[r], Sum) }))
	for r := range 2 {
		if a0[r][1023] != float32(r+1) || b0[r][1023] != 30 || a1[r][1023] != 300 {
			t.Errorf("rank %d: buffers hold %v, %v, %v; want %d, 30, 300", r, a0[r][1023], b0[r][1023], a1[r][1023], r+1)
		}
	}
}

// A full tmpfs is an error at Alloc (or a fallback under TransportAuto),
// never a SIGBUS at the first write. It needs a small tmpfs, which only
// root can mount: MSPIPE_TEST_SMALL_TMPFS names one (mount -t tmpfs -o
// size=1m none DIR).
func TestShmFullTmpfs(t *testing.T) {
	dir := os.Getenv("MSPIPE_TEST_SMALL_TMPFS")
	if dir == "" {
		t.Skip("set MSPIPE_TEST_SMALL_TMPFS to a tmpfs of about 1 MiB")
	}
	for _, transport := range []Transport{TransportAuto, TransportShm} {
		comms := group(t, 2, func(c *Config) { c.ShmDir, c.Transport = dir, transport })
		bufs := make([][]float32, 2)
		errs := onAll(comms, func(r int, c *Comm) error {
			var err error
			bufs[r], err = c.Alloc(context.Background(), 1<<20) // 4 MiB each
			return err
		})
		for r, err := range errs {
			if transport == TransportShm {
				if err == nil || !strings.Contains(err.Error(), "no space left on device") {
					t.Errorf("shm, rank %d: %v, want no space left", r, err)
				}
				continue
			}
			if err != nil || comms[r].IsShared(bufs[r]) {
				t.Errorf("auto, rank %d: %v, shared %v; want ordinary memory", r, err, comms[r].IsShared(bufs[r]))
			}
			bufs[r][len(bufs[r])-1] = 1 // writable, no SIGBUS
		}
	}
}

// ReduceScatter of a shared send buffer, AllGather into a shared recv
// buffer (in place or not) and Broadcast of a shared buffer go through
// shared memory and give the rank-order results TCP gives.
func TestShmReduceScatterAllGatherBroadcast(t *testing.T) {
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			comms := shmGroupOf(t, n, shmDir(t))
			const m = 1000 + 3 // per-rank block, past a portable block
			shared := allocAll(t, comms, n*m)
			ctx := context.Background()
			for _, op := range []Op{Sum, Mean, Max, Min, Prod} {
				xs := inputs(n, n*m, op, 9)
				want := rankOrderRef(xs, op)
				recv := make([][]float32, n)
				for r := range comms {
					copy(shared[r], xs[r])
					recv[r] = make([]float32, m)
				}
				mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.ReduceScatter(ctx, shared[r], recv[r], op) }))
				viaShm(t, comms, "reducescatter")
				for r := range comms {
					if i := sameBits(recv[r], want[r*m:(r+1)*m]); i >= 0 {
						t.Fatalf("reducescatter %v rank %d: element %d = %v, want %v", op, r, i, recv[r][i], want[r*m+i])
					}
					if i := sameBits(shared[r], xs[r]); i >= 0 {
						t.Fatalf("reducescatter %v changed rank %d's send at %d", op, r, i)
					}
				}
			}
			for _, inPlace := range []bool{false, true} {
				xs := inputs(n, m, Sum, 21)
				mustAll(t, onAll(comms, func(r int, c *Comm) error {
					send := slices.Clone(xs[r])
					if inPlace {
						send = shared[r][r*m : (r+1)*m]
						copy(send, xs[r])
					}
					return c.AllGather(ctx, send, shared[r])
				}))
				viaShm(t, comms, "allgather")
				for r := range comms {
					for q := range comms {
						if i := sameBits(shared[r][q*m:(q+1)*m], xs[q]); i >= 0 {
							t.Fatalf("allgather (in place %v) rank %d block %d: element %d differs", inPlace, r, q, i)
						}
					}
				}
			}
			for root := range comms {
				xs := inputs(n, n*m, Sum, uint64(30+root))
				for r := range comms {
					copy(shared[r], xs[r])
				}
				mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.Broadcast(ctx, shared[r], root) }))
				viaShm(t, comms, "broadcast")
				for r := range comms {
					if i := sameBits(shared[r], xs[root]); i >= 0 {
						t.Fatalf("broadcast from %d, rank %d: element %d differs", root, r, i)
					}
				}
			}
		})
	}
}

// viaShm checks that every rank ran its last call through shared memory.
func viaShm(t *testing.T, comms []*Comm, what string) {
	t.Helper()
	for r, c := range comms {
		if d := c.shm.load(r); d.region == noRegion {
			t.Fatalf("%s: rank %d ran over TCP", what, r)
		}
	}
}

// reduceOut gives the rank-order bits whether dst shares the buffers'
// alignment (vector kernel) or not (Go).
func TestShmReduceOutPaths(t *testing.T) {
	const n, count = 4, 5000
	comms := shmGroupOf(t, n, shmDir(t))
	bufs := allocAll(t, comms, count)
	g := comms[0].shm
	reg, _, _ := g.region(0, bufs[0])
	for _, op := range []Op{Sum, Mean, Max} {
		xs := inputs(n, count, op, 41)
		for r := range bufs {
			copy(bufs[r], xs[r])
		}
		want := rankOrderRef(xs, op)
		const lo = 37
		m := count - lo - 100
		for shift := range 8 {
			backing := make([]float32, m+16)
			dst := backing[shift : shift+m]
			g.reduceOut(reg, lo, dst, op, n)
			if i := sameBits(dst, want[lo:lo+m]); i >= 0 {
				t.Fatalf("%v, dst shifted by %d: element %d = %v, want %v", op, shift, i, dst[i], want[lo+i])
			}
		}
	}
}
