package shard

import (
	"context"

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
