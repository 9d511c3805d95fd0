package shard

import (
	"context"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
)

// Comm is what the engine needs from a communicator; *collective.Comm has
// it.
type Comm interface {
	Rank() int
	Size() int
	// Exchange sends send[p] to rank p and receives recv[p] from it, for
	// every rank p (AllToAllv); every rank calls it the same number of
	// times.
	Exchange(ctx context.Context, send, recv [][]float32) error
	// GroupAllReduce reduces buf in place over the ranks of group (sorted,
	// containing this rank), in group order; the groups of all ranks
	// partition the job.
	GroupAllReduce(ctx context.Context, buf []float32, op collective.Op, group []int) error
}

// timedComm counts the collective calls of a rank and the time spent in
// them, so that a step's communication can be told from its computation.
type timedComm struct {
	Comm
	calls   int
	elapsed time.Duration
}

func (c *timedComm) Exchange(ctx context.Context, send, recv [][]float32) error {
	defer c.count(time.Now())
	return c.Comm.Exchange(ctx, send, recv)
}

func (c *timedComm) GroupAllReduce(ctx context.Context, buf []float32, op collective.Op, group []int) error {
	defer c.count(time.Now())
	return c.Comm.GroupAllReduce(ctx, buf, op, group)
}

func (c *timedComm) count(began time.Time) {
	c.calls++
	c.elapsed += time.Since(began)
}
