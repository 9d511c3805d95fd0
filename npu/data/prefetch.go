package data

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// Iterator yields the batches of a range of epochs in order while a
// goroutine prepares the following ones, so loading overlaps compute. One
// producer goroutine fills batches strictly in (epoch, step) order, so the
// order never depends on scheduling; at most prefetch filled batches wait
// ahead of the consumer. Batches live in a fixed pool of prefetch+2 buffers
// (one being filled, prefetch ready, one held by the consumer), so a steady
// state allocates nothing.
type Iterator struct {
	ctx    context.Context
	cancel context.CancelFunc
	ready  chan *Batch
	free   chan *Batch
	done   chan struct{}
	held   *Batch
	err    error // set by the producer before it closes ready
	once   sync.Once
}

// Iterate starts a producer for epochs startEpoch .. startEpoch+epochs-1
// (dataset.repeat(epochs) starting at startEpoch) with up to prefetch ready
// batches (0 hands each batch over as soon as it is built). Cancelling ctx
// or calling Close stops the producer; Close waits for it to exit.
func (p *Pipeline) Iterate(ctx context.Context, startEpoch, epochs, prefetch int) (*Iterator, error) {
	if startEpoch < 0 || epochs < 0 || prefetch < 0 {
		return nil, fmt.Errorf("%w: iterate start epoch %d, epochs %d, prefetch %d must not be negative",
			ErrConfig, startEpoch, epochs, prefetch)
	}
	ctx, cancel := context.WithCancel(ctx)
	it := &Iterator{
		ctx:    ctx,
		cancel: cancel,
		ready:  make(chan *Batch, prefetch),
		free:   make(chan *Batch, prefetch+2),
		done:   make(chan struct{}),
	}
	for range prefetch + 2 {
		it.free <- p.NewBatch()
	}
	go it.produce(p, startEpoch, epochs)
	return it, nil
}

func (it *Iterator) produce(p *Pipeline, startEpoch, epochs int) {
	defer close(it.done)
	defer close(it.ready)
	loader := p.NewLoader()
	for epoch := startEpoch; epoch < startEpoch+epochs; epoch++ {
		for step := range p.StepsPerEpoch() {
			var b *Batch
			select {
			case b = <-it.free:
			case <-it.ctx.Done():
				it.err = it.ctx.Err()
				return
			}
			if err := loader.Fill(b, epoch, step); err != nil {
				it.err = err
				return
			}
			select {
			case it.ready <- b:
			case <-it.ctx.Done():
				it.err = it.ctx.Err()
				return
			}
		}
	}
}

// Next returns the next batch, valid until the following call to Next or
// Close. At the end of the stream it returns io.EOF; once the context is
// cancelled or Close was called, the context's error.
func (it *Iterator) Next() (*Batch, error) {
	if it.held != nil {
		it.free <- it.held // never blocks: the pool has room for every buffer
		it.held = nil
	}
	if err := it.ctx.Err(); err != nil {
		return nil, err // stop at once, even with batches still queued
	}
	select {
	case b, ok := <-it.ready:
		if !ok {
			if it.err != nil {
				return nil, it.err
			}
			return nil, io.EOF
		}
		it.held = b
		return b, nil
	case <-it.ctx.Done():
		return nil, it.ctx.Err()
	}
}

// Close stops the producer and waits until its goroutine has exited. It is
// safe to call more than once.
func (it *Iterator) Close() error {
	it.once.Do(func() {
		it.cancel()
		<-it.done
	})
	return nil
}
