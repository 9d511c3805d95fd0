package tensor

import (
	"runtime"
	"sync/atomic"
)

// Ranger is a piece of parallel work over the indices [0, n): Range(lo, hi)
// handles indices lo..hi-1. Distinct indices must write distinct outputs, so
// the result does not depend on which worker ran which range.
type Ranger interface {
	Range(lo, hi int)
}

// Workers is a fixed pool of goroutines that run kernels on several cores.
// A nil *Workers is valid and runs everything on the calling goroutine.
//
// One goroutine at a time may use a Workers value. Operations started through
// it do not allocate, so a training step that uses it stays allocation-free.
type Workers struct {
	n      int
	wake   chan struct{}
	done   chan struct{}
	job    forJob
	gemm   gemmJob
	dot    dotJob
	closed bool
}

// forJob hands out chunks of [0, n) to whichever worker asks next.
type forJob struct {
	r      Ranger
	n      int
	grain  int
	chunks int64
	next   atomic.Int64
}

func (j *forJob) run() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		lo := int(c) * j.grain
		j.r.Range(lo, min(lo+j.grain, j.n))
	}
}

// NewWorkers starts a pool of n workers, counting the caller, which always
// takes part. n <= 0 means runtime.GOMAXPROCS(0). Close stops the pool.
func NewWorkers(n int) *Workers {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	w := &Workers{n: n}
	if n > 1 {
		w.wake = make(chan struct{}, n-1)
		w.done = make(chan struct{}, n-1)
		for i := 0; i < n-1; i++ {
			go w.loop()
		}
	}
	return w
}

func (w *Workers) loop() {
	for range w.wake {
		w.job.run()
		w.done <- struct{}{}
	}
}

// N returns the number of goroutines that share the work (1 for nil).
func (w *Workers) N() int {
	if w == nil || w.closed {
		return 1
	}
	return w.n
}

// Close stops the pool's goroutines. Later calls run on the caller alone.
func (w *Workers) Close() {
	if w == nil || w.closed {
		return
	}
	w.closed = true
	if w.wake != nil {
		close(w.wake)
	}
}

// For runs r over [0, n) in chunks of grain indices (grain <= 0 picks a
// chunk size from n and the pool size) and returns when all are done.
func (w *Workers) For(n, grain int, r Ranger) {
	if n <= 0 {
		return
	}
	p := w.N()
	if grain <= 0 {
		grain = max(1, (n+4*p-1)/(4*p))
	}
	chunks := (n + grain - 1) / grain
	if p == 1 || chunks == 1 {
		r.Range(0, n)
		return
	}
	helpers := min(p-1, chunks-1)
	j := &w.job
	j.r, j.n, j.grain, j.chunks = r, n, grain, int64(chunks)
	j.next.Store(0)
	for i := 0; i < helpers; i++ {
		w.wake <- struct{}{}
	}
	j.run()
	for i := 0; i < helpers; i++ {
		<-w.done
	}
	j.r = nil
}
