package collective

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// twinJobs starts the same n-rank job twice, over TCP only and with
// shared memory in a fresh directory (hosts, if set, places the ranks on
// servers), and checks that the second stages between the ranks of each
// server and has left no file behind.
func twinJobs(t *testing.T, n int, hosts []int) (tcp, shm []*Comm, dir string) {
	t.Helper()
	dir = shmDir(t)
	tcp = group(t, n, func(c *Config) { smallSegments(Mesh)(c); c.Transport, c.Hosts = TransportTCP, hosts })
	shm = group(t, n, func(c *Config) { smallSegments(Mesh)(c); c.Transport, c.ShmDir, c.Hosts = TransportShm, dir, hosts })
	for r, c := range shm {
		for q := range n {
			same := hosts == nil || hosts[q] == hosts[r]
			if got := c.stagingWith(q); got != (same && q != r) {
				t.Fatalf("rank %d stages for rank %d: %v, want %v", r, q, got, same && q != r)
			}
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("%d shared-memory files left after Init, want them unlinked", len(left))
	}
	return tcp, shm, dir
}

// tcpFrames returns the data frames each rank has queued for each other
// rank so far.
func tcpFrames(comms []*Comm) [][]uint64 {
	out := make([][]uint64, len(comms))
	for r, c := range comms {
		out[r] = make([]uint64, len(comms))
		for q, p := range c.peers {
			if p != nil {
				out[r][q] = p.posted
			}
		}
	}
	return out
}

// checkNoFramesWithin fails if a rank queued TCP data frames since before
// for a rank of its own server.
func checkNoFramesWithin(t *testing.T, what string, comms []*Comm, hosts []int, before [][]uint64) {
	t.Helper()
	after := tcpFrames(comms)
	for r := range comms {
		for q := range comms {
			if q != r && (hosts == nil || hosts[q] == hosts[r]) && after[r][q] != before[r][q] {
				t.Fatalf("%s: rank %d sent %d frames over TCP to rank %d of its server", what, r, after[r][q]-before[r][q], q)
			}
		}
	}
}

// Exchange through staging memory delivers the same bits as over TCP, for
// uneven lengths, empty blocks, calls where nothing moves, and the own
// block in place; within a server no data goes over TCP, across servers
// it does.
func TestStagedExchangeMatchesTCP(t *testing.T) {
	for _, tc := range []struct {
		n     int
		hosts []int
	}{{2, nil}, {3, nil}, {8, nil}, {4, []int{0, 0, 1, 1}}, {6, []int{0, 1, 2, 0, 1, 2}}} {
		t.Run(fmt.Sprintf("n=%d/hosts=%v", tc.n, tc.hosts), func(t *testing.T) {
			n := tc.n
			tcp, shm, _ := twinJobs(t, n, tc.hosts)
			rng := rand.New(rand.NewPCG(uint64(n), 3))
			for round := range 6 {
				lens := make([][]int, n)
				for r := range lens {
					lens[r] = make([]int, n)
					for p := range lens[r] {
						switch {
						case round == 2: // nothing moves
						case rng.IntN(3) == 0: // an empty block
						default:
							lens[r][p] = 1 + rng.IntN(5000)
						}
					}
				}
				before := tcpFrames(shm)
				got := [2][][][]float32{}
				for j, comms := range [][]*Comm{tcp, shm} {
					got[j] = make([][][]float32, n)
					mustAll(t, onAll(comms, func(r int, c *Comm) error {
						send := make([][]float32, n)
						got[j][r] = make([][]float32, n)
						for p := range n {
							send[p] = block(uint64(round), r, p, lens[r][p])
							got[j][r][p] = make([]float32, lens[p][r])
						}
						if round%2 == 1 {
							got[j][r][r] = send[r]
						}
						return c.Exchange(context.Background(), send, got[j][r])
					}))
				}
				checkNoFramesWithin(t, fmt.Sprintf("round %d", round), shm, tc.hosts, before)
				for r := range n {
					for p := range n {
						if i := sameBits(got[1][r][p], got[0][r][p]); i >= 0 {
							t.Fatalf("round %d: rank %d's block from rank %d (%d elements): element %d differs from TCP", round, r, p, lens[p][r], i)
						}
						if i := sameBits(got[1][r][p], block(uint64(round), p, r, lens[p][r])); i >= 0 {
							t.Fatalf("round %d: rank %d's block from rank %d: element %d differs from what was sent", round, r, p, i)
						}
					}
				}
			}
		})
	}
}

// GroupAllReduce through staging memory gives the bits of TCP for every
// op, for groups along each axis of a grid, the whole job and ranks
// alone, with lengths of one element, around the size reduced whole by
// every member, and larger ones cut into ranges (uneven ones among them);
// with several servers, groups within a server stage and groups across
// servers use TCP, with the same bits.
func TestStagedGroupAllReduceMatchesTCP(t *testing.T) {
	ops := []Op{Sum, Mean, Max, Min, Prod}
	counts := []int{1, 7, stageDirectMax, stageDirectMax + 1, 3*4*stageBlock + 5, 70001}
	for _, tc := range []struct {
		dims  []int
		hosts []int
	}{{[]int{2}, nil}, {[]int{3}, nil}, {[]int{2, 4}, nil}, {[]int{2, 2}, []int{0, 0, 1, 1}}} {
		n := 1
		for _, d := range tc.dims {
			n *= d
		}
		t.Run(fmt.Sprintf("%v/hosts=%v", tc.dims, tc.hosts), func(t *testing.T) {
			tcp, shm, _ := twinJobs(t, n, tc.hosts)
			splits := map[string]func(r int) []int{
				"whole": func(int) []int { return axisGroup([]int{n}, 0, 0) },
				"alone": func(r int) []int { return []int{r} },
			}
			for axis := range tc.dims {
				splits[fmt.Sprintf("axis %d", axis)] = func(r int) []int { return axisGroup(tc.dims, axis, r) }
			}
			for name, split := range splits {
				for _, count := range counts {
					for _, op := range ops {
						xs := inputs(n, count, op, uint64(count)+uint64(op)<<8)
						var got [2][][]float32
						for j, comms := range [][]*Comm{tcp, shm} {
							got[j] = make([][]float32, n)
							for r := range n {
								got[j][r] = slices.Clone(xs[r])
							}
							mustAll(t, onAll(comms, func(r int, c *Comm) error {
								return c.GroupAllReduce(context.Background(), got[j][r], op, split(r))
							}))
						}
						for r := range n {
							if i := sameBits(got[1][r], got[0][r]); i >= 0 {
								t.Fatalf("%s, %d elements, %v: rank %d: element %d = %v, over TCP %v", name, count, op, r, i, got[1][r][i], got[0][r][i])
							}
							if i := sameBits(got[1][r], groupRef(xs, op, split(r))); i >= 0 {
								t.Fatalf("%s, %d elements, %v: rank %d: element %d differs from the group-order reference", name, count, op, r, i)
							}
						}
					}
				}
			}
		})
	}
}

// Groups within a server move no data over TCP.
func TestStagedGroupAllReduceStaysInMemory(t *testing.T) {
	hosts := []int{0, 0, 0, 1, 1, 1}
	_, shm, _ := twinJobs(t, 6, hosts)
	before := tcpFrames(shm)
	for _, count := range []int{3, 100_000} {
		mustAll(t, onAll(shm, func(r int, c *Comm) error {
			return c.GroupAllReduce(context.Background(), make([]float32, count), Sum, []int{r / 3 * 3, r/3*3 + 1, r/3*3 + 2})
		}))
	}
	checkNoFramesWithin(t, "groups within servers", shm, hosts, before)
}

// AllReduce (Mesh), AllGather and AllToAll of ordinary buffers on one
// server go through staging memory, with the bits of TCP; AllToAll of
// buffers from Alloc too.
func TestStagedOrdinaryBuffersMatchTCP(t *testing.T) {
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			tcp, shm, _ := twinJobs(t, n, nil)
			before := tcpFrames(shm)
			for _, count := range []int{1, 333, 50_000} {
				for _, op := range []Op{Sum, Mean, Max, Prod} {
					xs := inputs(n, count, op, uint64(count)*7+uint64(op))
					var got [2][][]float32
					for j, comms := range [][]*Comm{tcp, shm} {
						got[j] = make([][]float32, n)
						mustAll(t, onAll(comms, func(r int, c *Comm) error {
							got[j][r] = slices.Clone(xs[r])
							return c.AllReduce(context.Background(), got[j][r], op)
						}))
					}
					want := rankOrderRef(xs, op)
					for r := range n {
						if i := sameBits(got[1][r], got[0][r]); i >= 0 {
							t.Fatalf("allreduce %d elements %v: rank %d: element %d differs from TCP", count, op, r, i)
						}
						if i := sameBits(got[1][r], want); i >= 0 {
							t.Fatalf("allreduce %d elements %v: rank %d: element %d differs from rank order", count, op, r, i)
						}
					}
				}
				xs := inputs(n, count, Sum, uint64(count))
				for _, alloc := range []bool{false, true} {
					var gathered, swapped [2][][]float32
					for j, comms := range [][]*Comm{tcp, shm} {
						gathered[j], swapped[j] = make([][]float32, n), make([][]float32, n)
						var recvs [][]float32
						if alloc {
							recvs = allocAll(t, comms, n*count)
						}
						mustAll(t, onAll(comms, func(r int, c *Comm) error {
							gathered[j][r] = make([]float32, n*count)
							if err := c.AllGather(context.Background(), xs[r], gathered[j][r]); err != nil {
								return err
							}
							swapped[j][r] = make([]float32, n*count)
							if alloc {
								swapped[j][r] = recvs[r]
							}
							return c.AllToAll(context.Background(), gathered[j][r], swapped[j][r])
						}))
					}
					for r := range n {
						if i := sameBits(gathered[1][r], gathered[0][r]); i >= 0 {
							t.Fatalf("allgather %d elements: rank %d: element %d differs from TCP", count, r, i)
						}
						if i := sameBits(swapped[1][r], swapped[0][r]); i >= 0 {
							t.Fatalf("alltoall %d elements (alloc %v): rank %d: element %d differs from TCP", count, alloc, r, i)
						}
						for p := range n {
							if i := sameBits(swapped[1][r][p*count:(p+1)*count], xs[r]); i >= 0 {
								t.Fatalf("alltoall: rank %d's block from rank %d: element %d is not its own AllGather block", r, p, i)
							}
						}
					}
				}
			}
			checkNoFramesWithin(t, "ordinary buffers", shm, nil, before)
		})
	}
}

// SendRecv between the two ranks of a sub-communicator stages, with the
// bits of TCP, one way, the other, both, and neither.
func TestStagedSendRecvMatchesTCP(t *testing.T) {
	tcp, shm, _ := twinJobs(t, 2, nil)
	before := tcpFrames(shm)
	for round, lens := range [][2]int{{5000, 0}, {0, 3}, {17, 70001}, {0, 0}, {1, 1}} {
		var got [2][2][]float32
		for j, comms := range [][]*Comm{tcp, shm} {
			mustAll(t, onAll(comms, func(r int, c *Comm) error {
				got[j][r] = make([]float32, lens[1-r])
				return c.SendRecv(context.Background(), block(uint64(round), r, 1-r, lens[r]), got[j][r])
			}))
		}
		for r := range 2 {
			if i := sameBits(got[1][r], got[0][r]); i >= 0 {
				t.Fatalf("round %d: rank %d: element %d differs from TCP", round, r, i)
			}
			if i := sameBits(got[1][r], block(uint64(round), 1-r, r, lens[1-r])); i >= 0 {
				t.Fatalf("round %d: rank %d: element %d differs from what was sent", round, r, i)
			}
		}
	}
	checkNoFramesWithin(t, "sendrecv", shm, nil, before)
}

// A rank whose staging memory cannot take a call (as when the tmpfs is
// full) sends that call's data over TCP, and every rank still gets the
// same bits: Exchange per sender, GroupAllReduce and AllGather for every
// member.
func TestStagingFallsBackToTCP(t *testing.T) {
	const n = 4
	tcp, shm, _ := twinJobs(t, n, nil)
	shm[1].shm.stg.limit = 64 // bytes: rank 1 stages only tiny calls
	before := tcpFrames(shm)
	lens := [][]int{{3, 100, 0, 7}, {50, 1, 2000, 0}, {9, 9, 9, 9}, {0, 300, 1, 2}}
	var got [2][][][]float32
	for j, comms := range [][]*Comm{tcp, shm} {
		got[j] = make([][][]float32, n)
		mustAll(t, onAll(comms, func(r int, c *Comm) error {
			send := make([][]float32, n)
			got[j][r] = make([][]float32, n)
			for p := range n {
				send[p] = block(5, r, p, lens[r][p])
				got[j][r][p] = make([]float32, lens[p][r])
			}
			return c.Exchange(context.Background(), send, got[j][r])
		}))
	}
	after := tcpFrames(shm)
	for r := range n {
		for p := range n {
			if i := sameBits(got[1][r][p], got[0][r][p]); i >= 0 {
				t.Fatalf("exchange: rank %d's block from rank %d: element %d differs from TCP", r, p, i)
			}
			if sent := after[r][p] - before[r][p]; p != r && (sent > 0) != (r == 1) {
				t.Errorf("exchange: rank %d sent %d frames over TCP to rank %d", r, sent, p)
			}
		}
	}
	for _, count := range []int{10, 20_000} {
		xs := inputs(n, count, Sum, 77)
		var red, all [2][][]float32
		for j, comms := range [][]*Comm{tcp, shm} {
			red[j], all[j] = make([][]float32, n), make([][]float32, n)
			mustAll(t, onAll(comms, func(r int, c *Comm) error {
				red[j][r] = slices.Clone(xs[r])
				if err := c.GroupAllReduce(context.Background(), red[j][r], Mean, []int{0, 1, 2, 3}); err != nil {
					return err
				}
				all[j][r] = make([]float32, n*count)
				return c.AllGather(context.Background(), xs[r], all[j][r])
			}))
		}
		for r := range n {
			if i := sameBits(red[1][r], red[0][r]); i >= 0 {
				t.Fatalf("groupallreduce %d elements: rank %d: element %d differs from TCP", count, r, i)
			}
			if i := sameBits(all[1][r], all[0][r]); i >= 0 {
				t.Fatalf("allgather %d elements: rank %d: element %d differs from TCP", count, r, i)
			}
		}
	}
}

// A rank that never enters a staged Exchange is named by every other
// rank once the timeout has passed, also by ranks that wait on someone
// else; nothing hangs.
func TestStagedExchangeHangingRankIsNamed(t *testing.T) {
	const n, hanging = 4, 1
	timeout := time.Second
	if raceEnabled {
		timeout = 3 * time.Second
	}
	dir := shmDir(t)
	comms := group(t, n, func(c *Config) { c.Transport, c.ShmDir, c.Timeout = TransportShm, dir, timeout })
	var others sync.WaitGroup // the hanging rank comes once every other rank has given up
	others.Add(n - 1)
	start := time.Now()
	errs := onAll(comms, func(r int, c *Comm) error {
		send, recv := make([][]float32, n), make([][]float32, n)
		for p := range n {
			send[p], recv[p] = make([]float32, 10), make([]float32, 10)
		}
		if r == hanging {
			others.Wait()
			return c.Exchange(context.Background(), send, recv)
		}
		defer others.Done()
		return c.Exchange(context.Background(), send, recv)
	})
	for r, err := range errs {
		if r == hanging && err == nil {
			// Everything it needed was staged before the others gave up;
			// the news reaches it at its next call.
			err = comms[r].Barrier(context.Background())
		}
		wantPeer(t, fmt.Sprintf("rank %d", r), err, hanging, ErrPeerTimeout)
	}
	if took := time.Since(start); took < timeout {
		t.Errorf("failed after %v, before the %v timeout", took, timeout)
	}
}

// Ranks in different collectives at the same call, one of them staged,
// are out of step at once, naming each other's calls.
func TestStagedCallsOutOfStep(t *testing.T) {
	ctx := context.Background()
	exchange := func(c *Comm) error {
		b := [][]float32{make([]float32, 3), make([]float32, 3)}
		return c.Exchange(ctx, b, [][]float32{make([]float32, 3), make([]float32, 3)})
	}
	groupRed := func(c *Comm) error { return c.GroupAllReduce(ctx, make([]float32, 9), Sum, []int{0, 1}) }
	barrier := func(c *Comm) error { return c.Barrier(ctx) }
	for _, tc := range []struct {
		name  string
		calls [2]func(*Comm) error
		descs [2]string
	}{
		{"exchange/group", [2]func(*Comm) error{exchange, groupRed}, [2]string{"exchange #1", "groupallreduce #1 of 9 elements"}},
		{"group/barrier", [2]func(*Comm) error{groupRed, barrier}, [2]string{"groupallreduce #1 of 9 elements", "barrier #1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shmDir(t)
			comms := group(t, 2, func(c *Config) { c.Transport, c.ShmDir = TransportShm, dir })
			start := time.Now()
			errs := onAll(comms, func(r int, c *Comm) error { return tc.calls[r](c) })
			for r, err := range errs {
				if !errors.Is(err, ErrOutOfStep) {
					t.Fatalf("rank %d: %v, want ErrOutOfStep", r, err)
				}
				for _, d := range tc.descs {
					if !strings.Contains(err.Error(), d) {
						t.Errorf("rank %d: %q does not name %q", r, err, d)
					}
				}
			}
			if took := time.Since(start); took > comms[0].timeout {
				t.Errorf("took %v, the timeout is %v: found by waiting, not at once", took, comms[0].timeout)
			}
		})
	}
}

// Killing one end of a staged SendRecv, or stopping a rank of a staged
// Exchange, fails the others within the timeout, naming it.
func TestStagedPeerKilledOrStopped(t *testing.T) {
	t.Run("killed sendrecv", func(t *testing.T) {
		const victim = 1
		t.Setenv("MEMBERS", "5,7")
		timeout := 2 * time.Second
		procs, addrs := startRunningRanks(t, 2, Mesh, true, "sendrecv", timeout)
		time.Sleep(100 * time.Millisecond)
		killed := time.Now()
		procs[victim].cmd.Process.Kill()
		checkSurvivors(t, procs, victim, killed, timeout, fmt.Sprintf("error: collective: exchange: rank 7 (%s) closed the connection", addrs[victim]))
	})
	t.Run("stopped exchange", func(t *testing.T) {
		const n, victim = 4, 1
		timeout := 2 * time.Second
		procs, addrs := startRunningRanks(t, n, Mesh, true, "exchange", timeout)
		time.Sleep(100 * time.Millisecond)
		stopped := time.Now()
		procs[victim].cmd.Process.Signal(syscall.SIGSTOP)
		checkSurvivors(t, procs, victim, stopped, timeout, fmt.Sprintf("error: collective: exchange: rank %d (%s) did not answer within 2s", victim, addrs[victim]))
	})
}
