package shard

import (
	"context"
	"fmt"
	"sync"

	"github.com/mspipe/mspipe/npu/collective"
)

// memHub connects in-process ranks for tests that do not need the real
// transports: every call is two barriers, one after the ranks post what
// they send and one after they have read what they receive.
type memHub struct {
	n       int
	mu      sync.Mutex
	cond    *sync.Cond
	gen     int
	arrived int
	posted  []any
}

type memComm struct {
	hub  *memHub
	rank int
}

func memComms(n int) []Comm {
	h := &memHub{n: n, posted: make([]any, n)}
	h.cond = sync.NewCond(&h.mu)
	out := make([]Comm, n)
	for r := range out {
		out[r] = &memComm{hub: h, rank: r}
	}
	return out
}

func (h *memHub) barrier() {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.gen
	if h.arrived++; h.arrived == h.n {
		h.arrived = 0
		h.gen++
		h.cond.Broadcast()
		return
	}
	for g == h.gen {
		h.cond.Wait()
	}
}

func (c *memComm) Rank() int { return c.rank }
func (c *memComm) Size() int { return c.hub.n }

func (c *memComm) Exchange(ctx context.Context, send, recv [][]float32) error {
	c.hub.posted[c.rank] = send
	c.hub.barrier()
	var err error
	for p := range recv {
		from := c.hub.posted[p].([][]float32)[c.rank]
		if len(from) != len(recv[p]) && err == nil {
			err = fmt.Errorf("exchange: rank %d sends %d values, rank %d expects %d", p, len(from), c.rank, len(recv[p]))
		}
		copy(recv[p], from)
	}
	c.hub.barrier()
	return err
}

func (c *memComm) GroupAllReduce(ctx context.Context, buf []float32, op collective.Op, group []int) error {
	if op != collective.Sum {
		return fmt.Errorf("memComm reduces sums only, not %v", op)
	}
	c.hub.posted[c.rank] = append([]float32(nil), buf...)
	c.hub.barrier()
	var err error
	for i := range buf {
		var s float32
		for k, q := range group {
			v := c.hub.posted[q].([]float32)
			if len(v) != len(buf) {
				err = fmt.Errorf("group allreduce: rank %d has %d values, rank %d %d", q, len(v), c.rank, len(buf))
				break
			}
			if k == 0 {
				s = v[i]
			} else {
				s += v[i]
			}
		}
		buf[i] = s
	}
	c.hub.barrier()
	return err
}
