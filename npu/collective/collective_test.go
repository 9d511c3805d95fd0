package collective

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// smallSegments cuts buffers into 1 KiB frames so modest sizes exercise
// segmentation and pipelining.
func smallSegments(alg Algorithm) func(*Config) {
	return func(c *Config) { c.Algorithm, c.SegmentBytes = alg, 1024 }
}

func TestAllReduceMatchesSequentialReference(t *testing.T) {
	ops := []Op{Sum, Mean, Max, Min, Prod}
	for _, alg := range []Algorithm{Mesh, Ring} {
		for _, n := range []int{1, 2, 3, 4, 8} {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				comms := group(t, n, smallSegments(alg))
				counts := []int{0, 1, 2, n - 1, n + 1, 3*n + 2, 255, 256, 257, 1000, 20011}
				for _, count := range slices.Compact(slices.Sorted(slices.Values(counts))) {
					for _, op := range ops {
						xs := inputs(n, count, op, 1)
						want := rankOrderRef(xs, op)
						if alg == Ring {
							want = ringRef(xs, op)
						}
						bufs := make([][]float32, n)
						for r := range bufs {
							bufs[r] = slices.Clone(xs[r])
						}
						mustAll(t, onAll(comms, func(r int, c *Comm) error {
							return c.AllReduce(context.Background(), bufs[r], op)
						}))
						for r := range bufs {
							if i := sameBits(bufs[r], want); i >= 0 {
								t.Fatalf("count %d %v rank %d: element %d = %v, reference %v", count, op, r, i, bufs[r][i], want[i])
							}
						}
					}
				}
			})
		}
	}
}

// The references differ from each other on this data, so matching one of
// them bit for bit is a real check of the order.
func TestReductionOrdersAreDistinguishable(t *testing.T) {
	for _, n := range []int{3, 4, 8} {
		xs := inputs(n, 20011, Sum, 1)
		if sameBits(rankOrderRef(xs, Sum), ringRef(xs, Sum)) < 0 {
			t.Fatalf("n=%d: rank order and ring order give the same bits; the test data cannot tell them apart", n)
		}
	}
}

func TestAllReduceLargeBitIdenticalAcrossRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("large buffers")
	}
	const count, seed = 10_000_003, 7
	for _, tc := range []struct {
		alg   Algorithm
		n     int
		order func(n, c, j int) int
	}{{Mesh, 8, rankOrder}, {Ring, 3, ringOrder}} {
		t.Run(fmt.Sprintf("%v/n=%d", tc.alg, tc.n), func(t *testing.T) {
			comms := group(t, tc.n, func(c *Config) { c.Algorithm, c.Timeout = tc.alg, 30*time.Second })
			want := orderRef(tc.n, count, Sum, tc.order, func(r, i int) float32 { return value(seed, r, i, Sum) })
			bufs := make([][]float32, tc.n)
			for r := range bufs {
				bufs[r] = make([]float32, count)
			}
			for run := 0; run < 2; run++ {
				onAll(comms, func(r int, c *Comm) error {
					fill(bufs[r], seed, r, Sum)
					return nil
				})
				mustAll(t, onAll(comms, func(r int, c *Comm) error {
					return c.AllReduce(context.Background(), bufs[r], Sum)
				}))
				for r := range bufs {
					if i := sameBits(bufs[r], want); i >= 0 {
						t.Fatalf("run %d rank %d: element %d = %v, reference %v", run, r, i, bufs[r][i], want[i])
					}
				}
			}
		})
	}
}

// Mesh results do not depend on the segment size, i.e. on how the
// transfer was pipelined.
func TestMeshResultIndependentOfSegmentSize(t *testing.T) {
	const n, count = 4, 50_000
	xs := inputs(n, count, Sum, 3)
	want := rankOrderRef(xs, Sum)
	for _, seg := range []int{1024, 4096, 1 << 20} {
		comms := group(t, n, func(c *Config) { c.SegmentBytes = seg })
		bufs := make([][]float32, n)
		for r := range bufs {
			bufs[r] = slices.Clone(xs[r])
		}
		mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.AllReduce(context.Background(), bufs[r], Sum) }))
		for r := range bufs {
			if i := sameBits(bufs[r], want); i >= 0 {
				t.Fatalf("segment %d rank %d: element %d differs", seg, r, i)
			}
		}
	}
}

func TestReduceScatter(t *testing.T) {
	for _, alg := range []Algorithm{Mesh, Ring} {
		for _, n := range []int{1, 2, 3, 8} {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				comms := group(t, n, smallSegments(alg))
				for _, block := range []int{0, 1, 5, 700} {
					for _, op := range []Op{Sum, Mean, Max} {
						xs := inputs(n, n*block, op, 2)
						want := rankOrderRef(xs, op)
						if alg == Ring {
							want = ringRef(xs, op)
						}
						sends := make([][]float32, n)
						recvs := make([][]float32, n)
						for r := range sends {
							sends[r] = slices.Clone(xs[r])
							recvs[r] = make([]float32, block)
						}
						mustAll(t, onAll(comms, func(r int, c *Comm) error {
							return c.ReduceScatter(context.Background(), sends[r], recvs[r], op)
						}))
						for r := range recvs {
							if i := sameBits(recvs[r], want[r*block:(r+1)*block]); i >= 0 {
								t.Fatalf("block %d %v rank %d: element %d = %v, want %v", block, op, r, i, recvs[r][i], want[r*block+i])
							}
							if sameBits(sends[r], xs[r]) >= 0 {
								t.Fatalf("rank %d: send buffer modified", r)
							}
						}
					}
				}
			})
		}
	}
}

func TestAllGather(t *testing.T) {
	for _, alg := range []Algorithm{Mesh, Ring} {
		for _, n := range []int{1, 2, 3, 8} {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				comms := group(t, n, smallSegments(alg))
				for _, block := range []int{0, 1, 7, 1000} {
					for _, inPlace := range []bool{false, true} {
						xs := inputs(n, block, Sum, 4)
						want := slices.Concat(xs...)
						recvs := make([][]float32, n)
						mustAll(t, onAll(comms, func(r int, c *Comm) error {
							recvs[r] = make([]float32, n*block)
							send := xs[r]
							if inPlace {
								copy(recvs[r][r*block:], xs[r])
								send = recvs[r][r*block : (r+1)*block]
							}
							return c.AllGather(context.Background(), send, recvs[r])
						}))
						for r := range recvs {
							if i := sameBits(recvs[r], want); i >= 0 {
								t.Fatalf("block %d in place %v rank %d: element %d = %v, want %v", block, inPlace, r, i, recvs[r][i], want[i])
							}
						}
					}
				}
			})
		}
	}
}

func TestBroadcastFromEveryRoot(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			comms := group(t, n, smallSegments(Mesh))
			for _, count := range []int{0, 1, 300, 5000} {
				for root := 0; root < n; root++ {
					xs := inputs(n, count, Sum, uint64(root))
					bufs := make([][]float32, n)
					for r := range bufs {
						bufs[r] = slices.Clone(xs[r])
					}
					mustAll(t, onAll(comms, func(r int, c *Comm) error {
						return c.Broadcast(context.Background(), bufs[r], root)
					}))
					for r := range bufs {
						if i := sameBits(bufs[r], xs[root]); i >= 0 {
							t.Fatalf("count %d root %d rank %d: element %d differs", count, root, r, i)
						}
					}
				}
			}
		})
	}
}

func TestAllToAll(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			comms := group(t, n, smallSegments(Mesh))
			for _, block := range []int{0, 1, 600} {
				xs := inputs(n, n*block, Sum, 5)
				recvs := make([][]float32, n)
				mustAll(t, onAll(comms, func(r int, c *Comm) error {
					recvs[r] = make([]float32, n*block)
					return c.AllToAll(context.Background(), xs[r], recvs[r])
				}))
				for r := range recvs {
					for p := 0; p < n; p++ {
						got, want := recvs[r][p*block:(p+1)*block], xs[p][r*block:(r+1)*block]
						if i := sameBits(got, want); i >= 0 {
							t.Fatalf("block %d rank %d from %d: element %d differs", block, r, p, i)
						}
					}
				}
			}
		})
	}
}

// A rank leaves the barrier only after every rank has entered it.
func TestBarrierWaitsForEveryRank(t *testing.T) {
	const n, late = 4, 2
	comms := group(t, n, nil)
	entered := make([]time.Time, n)
	left := make([]time.Time, n)
	mustAll(t, onAll(comms, func(r int, c *Comm) error {
		if r == late {
			time.Sleep(200 * time.Millisecond)
		}
		entered[r] = time.Now()
		err := c.Barrier(context.Background())
		left[r] = time.Now()
		return err
	}))
	for r := range left {
		if left[r].Before(entered[late]) {
			t.Fatalf("rank %d left the barrier at %v, before rank %d entered at %v", r, left[r], late, entered[late])
		}
	}
}

// Mixed calls in the same order keep working; a rank that closes as soon
// as its last call returns does not disturb ranks still finishing theirs;
// Close leaves no goroutine behind.
func TestSequenceOfCollectivesAndNoLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, alg := range []Algorithm{Mesh, Ring} {
		comms, errs := initAll(configs(t, 4, smallSegments(alg)))
		mustAll(t, errs)
		mustAll(t, onAll(comms, func(r int, c *Comm) error {
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			buf := []float32{float32(r), 1, 2}
			for i := 0; i < 20; i++ {
				if err := c.AllReduce(ctx, buf, Max); err != nil {
					return err
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if err := c.Broadcast(ctx, buf, i%4); err != nil {
					return err
				}
			}
			if buf[0] != 3 {
				return fmt.Errorf("buf[0] = %v, want 3", buf[0])
			}
			big := make([]float32, 300_000) // several segments still in flight when the first ranks close
			return c.AllReduce(ctx, big, Sum)
		}))
	}
	checkNoLeak(t, base)
}

// Steady-state collectives allocate nothing: frames are written from and
// read into the caller's buffers, scratch space is reused.
func TestAllReduceDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumentation allocates")
	}
	for _, alg := range []Algorithm{Mesh, Ring} {
		const n = 4
		comms := group(t, n, smallSegments(alg))
		bufs := make([][]float32, n)
		for r := range bufs {
			bufs[r] = make([]float32, 10_000)
		}
		start := make([]chan struct{}, n)
		done := make(chan error, n)
		for r := range comms {
			start[r] = make(chan struct{})
			go func() {
				for range start[r] {
					done <- comms[r].AllReduce(context.Background(), bufs[r], Sum)
				}
			}()
		}
		step := func() {
			for r := range start {
				start[r] <- struct{}{}
			}
			for range start {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		}
		step() // grow scratch buffers
		if allocs := testing.AllocsPerRun(20, step); allocs > 0 {
			t.Errorf("%v: %.1f allocations per AllReduce of %d ranks, want 0", alg, allocs, n)
		}
		for r := range start {
			close(start[r])
		}
	}
}

func TestSingleRankNeedsNoNetwork(t *testing.T) {
	c, err := Init(context.Background(), Config{Rank: 0, Size: 1, Addrs: []string{"127.0.0.1:1"}, Secret: testSecret()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := []float32{1, 2, 3}
	ctx := context.Background()
	if err := c.AllReduce(ctx, buf, Mean); err != nil || !slices.Equal(buf, []float32{1, 2, 3}) {
		t.Fatalf("allreduce: %v %v", buf, err)
	}
	recv := make([]float32, 3)
	if err := c.AllGather(ctx, buf, recv); err != nil || !slices.Equal(recv, buf) {
		t.Fatalf("allgather: %v %v", recv, err)
	}
	if err := c.ReduceScatter(ctx, buf, recv, Sum); err != nil || !slices.Equal(recv, buf) {
		t.Fatalf("reducescatter: %v %v", recv, err)
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}
