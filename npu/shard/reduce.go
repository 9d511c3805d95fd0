package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
)

// paramReduce is one parameter whose gradient (trainable) or value after
// a training forward (BatchNorm statistics) is summed, or averaged, over
// the ranks of its bucket's group.
type paramReduce struct {
	p    *nn.Param
	mean bool
}

// bucket is the parameters reduced over the same partition of the ranks,
// packed into one GroupAllReduce per step.
type bucket struct {
	key     string // the partition, the same on every rank
	group   []int  // this rank's part of it
	entries []paramReduce
	buf     []float32
	// room is buf with one element more, where the step's loss rides
	// when the bucket's group is the loss's (reduceParams).
	room []float32
	// whole marks a bucket reduced over every rank through the
	// communicator's own AllReduce, on memory it allocated (shared memory
	// within a host), instead of GroupAllReduce's point-to-point frames.
	whole bool
}

// wholeJobReducer is a communicator that also reduces over every rank in
// memory it provides, as *collective.Comm does: with the shared-memory
// transport, an AllReduce of a buffer from Alloc reads the other ranks'
// buffers in place. Its sum runs in rank order, the order GroupAllReduce
// uses, so the bits are the same either way.
type wholeJobReducer interface {
	Alloc(ctx context.Context, count int) ([]float32, error)
	AllReduce(ctx context.Context, buf []float32, op collective.Op) error
}

// wholeReducer returns the job's communicator when it can reduce over
// every rank itself.
func (n *Net) wholeReducer() (wholeJobReducer, bool) {
	if n.comm == nil {
		return nil, false
	}
	r, ok := n.comm.Comm.(wholeJobReducer)
	return r, ok
}

// allocBucket gives b its buffer: from the communicator when b spans every
// rank and the communicator can reduce over all of them itself (Alloc is
// a collective: every rank makes the same calls, since every rank has the
// same whole-job buckets in the same order), ordinary memory otherwise.
func (n *Net) allocBucket(b *bucket, size int) error {
	if r, ok := n.wholeReducer(); ok && n.cfg.Devices > 1 && len(b.group) == n.cfg.Devices {
		buf, err := r.Alloc(context.Background(), size+1)
		if err != nil {
			return fmt.Errorf("gradient buffer over all %d ranks: %w", n.cfg.Devices, err)
		}
		b.room, b.buf, b.whole = buf, buf[:size], true
		return nil
	}
	b.room = make([]float32, size+1)
	b.buf = b.room[:size]
	return nil
}

// partition returns rank's group of the ranks that hold what it holds of l
// except along axes, and a key naming the whole partition, which every
// rank computes alike, so that all put the same parameters in the same
// bucket and make the same calls.
func partition(l parallel.Layout, axes []int, rank int) (string, []int, error) {
	var key strings.Builder
	var mine []int
	for r := range l.Devices() {
		g, err := l.Group(r, axes)
		if err != nil {
			return "", nil, err
		}
		if g[0] == r { // name each group once, by its first rank
			fmt.Fprint(&key, g)
		}
		if r == rank {
			mine = g
		}
	}
	return key.String(), mine, nil
}

// addReduce puts red in the bucket of partition key (a new one, in order of
// first use, if none has it).
func (n *Net) addReduce(key string, group []int, red paramReduce) {
	i := slices.IndexFunc(n.buckets, func(b *bucket) bool { return b.key == key })
	if i < 0 {
		n.buckets = append(n.buckets, &bucket{key: key, group: group})
		i = len(n.buckets) - 1
	}
	n.buckets[i].entries = append(n.buckets[i].entries, red)
}

// lossBucket returns the index of the last bucket reduced over group, in
// the same order, or -1.
func (n *Net) lossBucket(group []int) int {
	for i := len(n.buckets) - 1; i >= 0; i-- {
		if slices.Equal(n.buckets[i].group, group) {
			return i
		}
	}
	return -1
}

// reduceParams sums (or averages) the parameter gradients over the ranks
// they are partial over, and averages the BatchNorm statistics a split
// batch left different on each rank: one GroupAllReduce per bucket. With
// loss, the sum of the step's loss rides as one more element in bucket
// lossIn's reduction (the same ranks, the same order, so the same bits as
// a call of its own) and is left in *loss: a round of the ranks fewer.
func (n *Net) reduceParams(ctx context.Context, lossIn int, loss *float32) error {
	for i, b := range n.buckets {
		off := 0
		for _, e := range b.entries {
			off += copy(b.buf[off:], e.values())
		}
		buf := b.buf
		if loss != nil && i == lossIn {
			buf = b.room[:len(b.buf)+1]
			buf[len(b.buf)] = *loss
		}
		var err error
		if r, _ := n.wholeReducer(); b.whole {
			began := time.Now()
			err = r.AllReduce(ctx, buf, collective.Sum)
			n.comm.count(began)
		} else {
			err = n.cfg.Comm.GroupAllReduce(ctx, buf, collective.Sum, b.group)
		}
		if loss != nil && i == lossIn {
			*loss = buf[len(b.buf)]
		}
		if err != nil {
			return fmt.Errorf("parameter reduction over ranks %v: %w", b.group, err)
		}
		off = 0
		size := float32(len(b.group))
		for _, e := range b.entries {
			v := e.values()
			off += copy(v, b.buf[off:])
			if e.mean { // as collective.Mean: the sum divided by the group size
				for i := range v {
					v[i] /= size
				}
			}
		}
	}
	return nil
}

// values returns what is reduced: the gradient, or a statistic's value.
func (e paramReduce) values() []float32 {
	if e.p.Trainable {
		return e.p.Grad.Data()
	}
	return e.p.Value.Data()
}
