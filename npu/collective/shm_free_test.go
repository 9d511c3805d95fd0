package collective

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Ranks that run a long mix of calls each at its own pace get the bits of
// the references in every call. The tests that call onAll once per call
// keep the ranks in step; here a fast rank runs ahead as far as the calls
// let it (past a GroupAllReduce that leaves a slow rank out, an Exchange
// whose data that rank has staged, the first barrier of an AllReduce) and
// finds staging halves, descriptors and barrier words still in use by the
// slow one. Groups change between calls, some of them leave a rank alone
// or are empty, lengths cross the size reduced whole, Alloc buffers go
// through barriers, and rank 2 stages at most 2*stageDirectMax elements
// a call, so calls with more fall back to TCP. On one server, and on two
// (where Alloc buffers combine across servers over TCP, and so do groups
// and Exchange blocks between the servers).
func TestMixedCallsRunningFree(t *testing.T) {
	t.Run("one server", func(t *testing.T) { mixedCallsRunningFree(t, nil) })
	t.Run("two servers", func(t *testing.T) { mixedCallsRunningFree(t, []int{0, 0, 1, 1}) })
}

func mixedCallsRunningFree(t *testing.T, hosts []int) {
	const n, calls = 4, 400
	dir := shmDir(t)
	comms := group(t, n, func(c *Config) { c.Transport, c.ShmDir, c.Hosts = TransportShm, dir, hosts })
	allocs := allocAll(t, comms, 3*stageDirectMax)
	comms[2].shm.stg.limit = 4 * 2 * stageDirectMax
	partitions := [][][]int{{{0, 1, 2, 3}}, {{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}, {{0}, {1}, {2}, {3}}, {{0}, {1, 2, 3}}}
	counts := []int{0, 1, 7, stageDirectMax, stageDirectMax + 1, 3 * stageDirectMax}
	ops := []Op{Sum, Mean, Max, Prod}
	mustAll(t, onAll(comms, func(r int, c *Comm) error {
		ctx := context.Background()
		plan := rand.New(rand.NewPCG(7, 11))         // the calls: the same on every rank
		pace := rand.New(rand.NewPCG(uint64(r), 13)) // this rank's pauses
		for k := range calls {
			seed := uint64(k) + 1
			kind, count, op := plan.IntN(5), counts[plan.IntN(len(counts))], ops[plan.IntN(len(ops))]
			part := partitions[plan.IntN(len(partitions))]
			lens := make([][]int, n) // Exchange: lens[from][to]
			for p := range lens {
				lens[p] = make([]int, n)
				for q := range lens[p] {
					lens[p][q] = counts[plan.IntN(len(counts))]
				}
			}
			if pace.IntN(8) == 0 {
				time.Sleep(time.Duration(pace.IntN(2000)) * time.Microsecond)
			}
			var what string
			var got, want []float32
			switch kind {
			case 0:
				var grp []int
				for _, g := range part {
					if slices.Contains(g, r) {
						grp = g
					}
				}
				xs := inputs(n, count, op, seed)
				what = fmt.Sprintf("groupallreduce of %d elements (%v) in %v", count, op, grp)
				got, want = xs[r], groupRef(xs, op, grp)
				if err := c.GroupAllReduce(ctx, got, op, grp); err != nil {
					return fmt.Errorf("call %d, %s: %w", k+1, what, err)
				}
			case 1, 2:
				xs := inputs(n, max(count, 1), op, seed)
				got, want = xs[r], rankOrderRef(xs, op)
				if kind == 2 {
					got = allocs[r][:len(xs[r])]
					copy(got, xs[r])
					if hosts != nil {
						want = serverOrderRef(xs, op, hosts)
					}
				}
				what = fmt.Sprintf("allreduce of %d elements (%v, alloc %v)", len(got), op, kind == 2)
				if err := c.AllReduce(ctx, got, op); err != nil {
					return fmt.Errorf("call %d, %s: %w", k+1, what, err)
				}
			case 3:
				send, recv := make([][]float32, n), make([][]float32, n)
				for p := range n {
					send[p], recv[p] = block(seed, r, p, lens[r][p]), make([]float32, lens[p][r])
				}
				what = "exchange"
				if err := c.Exchange(ctx, send, recv); err != nil {
					return fmt.Errorf("call %d, %s: %w", k+1, what, err)
				}
				for p := range n {
					got, want = append(got, recv[p]...), append(want, block(seed, p, r, lens[p][r])...)
				}
			case 4:
				xs := inputs(n, count, Sum, seed)
				got, want = make([]float32, n*count), slices.Concat(xs...)
				what = fmt.Sprintf("allgather of %d elements", count)
				if err := c.AllGather(ctx, xs[r], got); err != nil {
					return fmt.Errorf("call %d, %s: %w", k+1, what, err)
				}
			}
			if i := sameBits(got, want); i >= 0 {
				return fmt.Errorf("call %d, %s: element %d of %d differs from the reference", k+1, what, i, len(want))
			}
		}
		return nil
	}))
	if frames := tcpFrames(comms)[2]; hosts == nil && slices.Max(frames) == 0 {
		t.Fatalf("rank 2 sent no data over TCP: no call fell back (frames by rank %v)", frames)
	}
}

// serverOrderRef is AllReduce of Alloc buffers with the ranks on the
// servers hosts gives: a reduction over servers (in the order of their
// numbers) of reductions over each server's ranks (in rank order).
func serverOrderRef(xs [][]float32, op Op, hosts []int) []float32 {
	partial := op
	if op == Mean {
		partial = Sum
	}
	servers := slices.Compact(slices.Sorted(slices.Values(hosts)))
	ref := make([]float32, len(xs[0]))
	for i := range ref {
		for si, h := range servers {
			var sub float32
			first := true
			for r := range xs {
				if hosts[r] == h {
					if first {
						sub, first = xs[r][i], false
					} else {
						sub = combine(partial, sub, xs[r][i])
					}
				}
			}
			if si == 0 {
				ref[i] = sub
			} else {
				ref[i] = combine(partial, ref[i], sub)
			}
		}
		if op == Mean {
			ref[i] /= float32(len(xs))
		}
	}
	return ref
}
