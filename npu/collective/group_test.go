package collective

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// axisGroup returns the ranks that share every coordinate of rank r but
// the one along axis in a device grid of dims (row-major, the last axis
// varying fastest), ascending.
func axisGroup(dims []int, axis, r int) []int {
	stride := 1
	for _, d := range dims[axis+1:] {
		stride *= d
	}
	base := r - (r/stride%dims[axis])*stride
	g := make([]int, dims[axis])
	for k := range g {
		g[k] = base + k*stride
	}
	return g
}

func TestAxisGroup(t *testing.T) {
	for _, tc := range []struct {
		dims    []int
		axis, r int
		want    []int
	}{
		{[]int{2, 4}, 0, 5, []int{1, 5}},
		{[]int{2, 4}, 1, 5, []int{4, 5, 6, 7}},
		{[]int{2, 2, 2}, 0, 3, []int{3, 7}},
		{[]int{2, 2, 2}, 1, 5, []int{5, 7}},
		{[]int{2, 2, 2}, 2, 6, []int{6, 7}},
	} {
		if got := axisGroup(tc.dims, tc.axis, tc.r); !slices.Equal(got, tc.want) {
			t.Errorf("axisGroup(%v, %d, %d) = %v, want %v", tc.dims, tc.axis, tc.r, got, tc.want)
		}
	}
}

// groupRef reduces the inputs of group's ranks one after the other in
// group order, as one process would.
func groupRef(xs [][]float32, op Op, group []int) []float32 {
	ref := slices.Clone(xs[group[0]])
	for i := range ref {
		for _, g := range group[1:] {
			ref[i] = combine(op, ref[i], xs[g][i])
		}
		if op == Mean {
			ref[i] /= float32(len(group))
		}
	}
	return ref
}

// GroupAllReduce over the groups along each axis of a device grid (and
// over the whole job, and with every rank alone) gives every member the
// bits of the sequential reduction in group order, for every op, lengths
// of less than one frame per member up to more than maxSegments frames per
// chunk. With shared memory the buffers come from Alloc.
func TestGroupAllReduceMatchesGroupOrder(t *testing.T) {
	ops := []Op{Sum, Mean, Max, Min, Prod}
	counts := []int{7, 1007, 2*maxSegments*256 + 13}
	for _, transport := range []string{"tcp", "shm"} {
		for _, dims := range [][]int{{2}, {2, 2}, {2, 4}, {2, 2, 2}} {
			n := 1
			for _, d := range dims {
				n *= d
			}
			t.Run(fmt.Sprintf("%s/%v", transport, dims), func(t *testing.T) {
				comms := smallJob(t, n, transport)
				bufs := make([][]float32, n)
				if transport == "shm" {
					bufs = allocAll(t, comms, counts[len(counts)-1])
				} else {
					for r := range bufs {
						bufs[r] = make([]float32, counts[len(counts)-1])
					}
				}
				type split struct {
					name  string
					group func(r int) []int
				}
				splits := []split{
					{"whole", func(int) []int { return axisGroup([]int{n}, 0, 0) }},
					{"alone", func(r int) []int { return []int{r} }},
				}
				for axis := range dims {
					splits = append(splits, split{fmt.Sprintf("axis %d", axis), func(r int) []int { return axisGroup(dims, axis, r) }})
				}
				for _, sp := range splits {
					for _, count := range counts {
						for _, op := range ops {
							xs := inputs(n, count, op, uint64(count)+uint64(op)<<8)
							for r := range bufs {
								copy(bufs[r], xs[r])
							}
							mustAll(t, onAll(comms, func(r int, c *Comm) error {
								return c.GroupAllReduce(context.Background(), bufs[r][:count], op, sp.group(r))
							}))
							for r := range bufs {
								want := groupRef(xs, op, sp.group(r))
								if i := sameBits(bufs[r][:count], want); i >= 0 {
									t.Fatalf("%s, %d elements, %v: rank %d (group %v): element %d = %v, reference %v",
										sp.name, count, op, r, sp.group(r), i, bufs[r][i], want[i])
								}
							}
						}
					}
				}
			})
		}
	}
}

// The reference is strict: reducing the same group in another order gives
// other bits, so a group reduced out of order would fail the test above.
func TestGroupOrderIsDistinguishable(t *testing.T) {
	group := []int{1, 3, 5, 7}
	xs := inputs(8, 1000, Sum, 3)
	reversed := groupRef(xs, Sum, []int{7, 5, 3, 1})
	if sameBits(groupRef(xs, Sum, group), reversed) < 0 {
		t.Fatal("group order and reversed order give the same bits; the inputs cannot tell orders apart")
	}
}

func TestGroupAllReduceArgumentErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    Op
		group []int
		want  string
	}{
		{"without self", Sum, []int{1}, "group [1] does not contain rank 0"},
		{"empty", Sum, nil, "group [] does not contain rank 0"},
		{"unsorted", Sum, []int{1, 0}, "group [1 0] is not sorted ascending without repeats"},
		{"repeated", Sum, []int{0, 0, 1}, "group [0 0 1] is not sorted ascending without repeats"},
		{"out of range", Sum, []int{0, 2}, "group [0 2]: rank 2 out of range 0-1"},
		{"op", Op(9), []int{0, 1}, "unknown reduce op 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := group(t, 2, nil)
			errs := onAll(comms, func(r int, c *Comm) error {
				if r == 0 {
					return c.GroupAllReduce(context.Background(), make([]float32, 10), tc.op, tc.group)
				}
				return c.GroupAllReduce(context.Background(), make([]float32, 10), Sum, []int{0, 1})
			})
			if !errors.Is(errs[0], ErrConfig) || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("rank 0: %v, want ErrConfig containing %q", errs[0], tc.want)
			}
			wantPeer(t, "rank 1", errs[1], 0, ErrPeerAborted)
			if !strings.Contains(errs[1].Error(), tc.want) {
				t.Errorf("rank 1: %q does not carry rank 0's reason", errs[1])
			}
		})
	}
}

// Members that disagree about the length or the group find out from the
// first frame and report both calls; the ranks of other groups learn it
// during their call or at their next one. Nothing waits for a timeout.
func TestGroupAllReduceOutOfStep(t *testing.T) {
	pairs := func(r int) []int { return []int{r &^ 1, r | 1} }
	for _, tc := range []struct {
		name   string
		count  func(r int) int
		group  func(r int) []int
		detail []string
	}{
		{"length", func(r int) int {
			if r == 1 {
				return 101
			}
			return 100
		}, pairs, []string{"groupallreduce #1 of 101 elements (sum, group ", "groupallreduce #1 of 100 elements (sum, group "}},
		{"group", func(int) int { return 100 }, func(r int) []int {
			switch r {
			case 1, 2:
				return []int{0, 1, 2}
			}
			return pairs(r)
		}, []string{fmt.Sprintf("(sum, group %06x)", groupExtra(Sum, []int{0, 1})>>8), fmt.Sprintf("(sum, group %06x)", groupExtra(Sum, []int{0, 1, 2})>>8)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := group(t, 4, nil)
			errs := onAll(comms, func(r int, c *Comm) error {
				return c.GroupAllReduce(context.Background(), make([]float32, tc.count(r)), Sum, tc.group(r))
			})
			for r, err := range errs {
				if err == nil {
					err = comms[r].Barrier(context.Background())
				}
				var pe *PeerError
				if !errors.As(err, &pe) || !errors.Is(err, ErrOutOfStep) || (pe.Rank != 0 && pe.Rank != 1) {
					t.Fatalf("rank %d: %v, want ErrOutOfStep naming rank 0 or 1", r, err)
				}
				for _, d := range tc.detail {
					if !strings.Contains(err.Error(), d) {
						t.Errorf("rank %d: %q does not contain %q", r, err, d)
					}
				}
			}
		})
	}
}

// A rank that closes its communicator in the middle of Exchange or
// GroupAllReduce fails every other rank with an error naming it, also the
// ranks of other groups, which never talk to it in the call; nothing hangs
// or leaks.
func TestCloseDuringGroupCollectivesFailsEveryRank(t *testing.T) {
	const n, quitter = 4, 2
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(r int, c *Comm) func() error
	}{
		{"exchange", func(r int, c *Comm) func() error {
			send, recv := make([][]float32, n), make([][]float32, n)
			for p := range n {
				send[p], recv[p] = make([]float32, 1<<16), make([]float32, 1<<16)
			}
			return func() error { return c.Exchange(ctx, send, recv) }
		}},
		{"groupallreduce", func(r int, c *Comm) func() error {
			buf := make([]float32, 1<<18)
			return func() error { return c.GroupAllReduce(ctx, buf, Sum, []int{r &^ 1, r | 1}) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			comms, errs := initAll(configs(t, n, func(c *Config) { c.Timeout = 5 * time.Second }))
			mustAll(t, errs)
			errs = onAll(comms, func(r int, c *Comm) error {
				call := tc.call(r, c)
				for i := 0; i < 10000; i++ {
					if r == quitter && i == 3 {
						go c.Close()
					}
					if err := call(); err != nil {
						return err
					}
				}
				return errors.New("no failure after 10000 calls")
			})
			for r, err := range errs {
				if r == quitter {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("rank %d (closed): %v, want ErrClosed", r, err)
					}
					continue
				}
				// Left, not silent: the news came before any timeout.
				wantPeer(t, fmt.Sprintf("rank %d", r), err, quitter, ErrPeerLeft)
				if !strings.HasPrefix(err.Error(), "collective: "+tc.name+": ") {
					t.Errorf("rank %d: %q does not start with the collective", r, err)
				}
			}
			closeAll(comms)
			checkNoLeak(t, base)
		})
	}
}

// Killing one rank process in the middle of Exchange or GroupAllReduce
// fails every other rank within the timeout, each naming the dead rank.
func TestKilledRankFailsGroupCollectives(t *testing.T) {
	const n, victim = 4, 2
	timeout := 2 * time.Second
	for _, mode := range []string{"exchange", "group"} {
		for _, shm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shm=%v", mode, shm), func(t *testing.T) {
				procs, addrs := startRunningRanks(t, n, Mesh, shm, mode, timeout)
				time.Sleep(100 * time.Millisecond)
				killed := time.Now()
				procs[victim].cmd.Process.Kill()
				op := map[string]string{"exchange": "exchange", "group": "groupallreduce"}[mode]
				checkSurvivors(t, procs, victim, killed, timeout, "error: collective: "+op+": ")
				for r, p := range procs {
					out := p.output()
					if want := fmt.Sprintf("rank %d (%s) closed the connection", victim, addrs[victim]); r != victim && !strings.Contains(out[len(out)-1], want) {
						t.Errorf("rank %d: %q does not contain %q", r, out[len(out)-1], want)
					}
				}
			})
		}
	}
}
