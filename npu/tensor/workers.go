package tensor

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Ranger is a piece of parallel work over the indices [0, n): Range(lo, hi)
// handles indices lo..hi-1. Distinct indices must write distinct outputs, so
// the result does not depend on which worker ran which range.
type Ranger interface {
	Range(lo, hi int)
}

// slotRanger is a Ranger that keeps scratch per worker: rangeSlot(slot,
// lo, hi) handles indices lo..hi-1 on worker slot (0 ≤ slot < N()), and no
// two workers run with the same slot at once.
type slotRanger interface {
	rangeSlot(slot, lo, hi int)
}

// workerSpin is how long an idle helper keeps polling for the next job
// before it parks. A training step hands out a few hundred jobs, a few to a
// few hundred microseconds apart; a parked helper is woken through the OS,
// which on a virtual machine whose idle vCPU has been halted takes 50-200 µs,
// as long as a whole job. Polling keeps that latency off every job (OpenMP
// runtimes do the same); the helpers yield to other goroutines while they
// poll and park once the owner stops handing out work.
const workerSpin = 5 * time.Millisecond

// yieldEvery is how many polls of a job counter (a few microseconds' worth)
// pass between yields of the core to other goroutines.
const yieldEvery = 4096

// maxChunks bounds the chunks of one job, so a span fits in one word.
const maxChunks = 1 << 30

// Workers is a fixed pool of goroutines that run kernels on several cores.
// A nil *Workers is valid and runs everything on the calling goroutine.
//
// Work is split with affinity: worker i first runs the i-th of N equal,
// contiguous shares of a job's chunks, and only then takes chunks from the
// far end of the other shares. Successive jobs over the same index space
// (the images of a batch, say) therefore keep each core on the same data,
// which stays in that core's caches, while a core slowed by other load is
// still helped out.
//
// One goroutine at a time may use a Workers value. Operations started through
// it do not allocate, so a training step that uses it stays allocation-free.
type Workers struct {
	n       int
	helpers []helper
	// seq is the number of jobs started; a helper runs job when it sees seq
	// move. A job with quit set stops the helpers.
	seq     atomic.Uint64
	pending atomic.Int64 // helpers that have not finished the current job
	job     forJob
	quit    bool
	gemm    gemmJob
	dot     dotJob
	closed  bool
}

// helper is the state of one helper goroutine, padded to its own cache
// line so that polling does not slow the owner's writes.
type helper struct {
	parked atomic.Bool   // asleep on wake, or about to be
	wake   chan struct{} // one token per wake-up of a parked helper
	_      [48]byte
}

// span is one worker's share of a job's chunks, [lo, hi) in one word: the
// owner takes chunks from the front, others steal from the back.
type span struct {
	v atomic.Uint64
	_ [56]byte
}

func packSpan(lo, hi int) uint64 { return uint64(lo) | uint64(hi)<<32 }

// take removes the first (or, with back, the last) chunk of the span.
func (s *span) take(back bool) (int, bool) {
	for {
		v := s.v.Load()
		lo, hi := int(uint32(v)), int(v>>32)
		if lo >= hi {
			return 0, false
		}
		next, c := packSpan(lo+1, hi), lo
		if back {
			next, c = packSpan(lo, hi-1), hi-1
		}
		if s.v.CompareAndSwap(v, next) {
			return c, true
		}
	}
}

// forJob is the job the workers share: chunks of grain indices of [0, n),
// run through r or, with per-worker scratch, through s.
type forJob struct {
	r      Ranger
	s      slotRanger
	n      int
	grain  int
	chunks int
	spans  []span // one per worker
}

// run is worker's part of the job: its own span, then what is left of the
// others'.
func (j *forJob) run(worker int) {
	p := len(j.spans)
	for k := 0; k < p; k++ {
		s := &j.spans[(worker+k)%p]
		for {
			c, ok := s.take(k > 0)
			if !ok {
				break
			}
			lo := c * j.grain
			hi := min(lo+j.grain, j.n)
			if j.s != nil {
				j.s.rangeSlot(worker, lo, hi)
			} else {
				j.r.Range(lo, hi)
			}
		}
	}
}

// NewWorkers starts a pool of n workers, counting the caller, which always
// takes part. n <= 0 means runtime.GOMAXPROCS(0). Close stops the pool.
func NewWorkers(n int) *Workers {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	w := &Workers{n: n}
	w.job.spans = make([]span, n)
	if n > 1 {
		w.helpers = make([]helper, n-1)
		for i := range w.helpers {
			w.helpers[i].wake = make(chan struct{}, 1)
			go w.loop(i + 1)
		}
	}
	return w
}

// loop is helper worker's life: every job the owner starts, until one says
// quit.
func (w *Workers) loop(worker int) {
	h := &w.helpers[worker-1]
	var seen uint64
	for {
		seen = w.await(h, seen)
		if w.quit {
			w.pending.Add(-1)
			return
		}
		w.job.run(worker)
		w.pending.Add(-1)
	}
}

// await returns the job count once it differs from seen: first by polling,
// yielding the core to other goroutines now and then, and after workerSpin
// without a job by parking until the owner wakes the helper.
func (w *Workers) await(h *helper, seen uint64) uint64 {
	var start time.Time
	for i := 1; ; i++ {
		if seq := w.seq.Load(); seq != seen {
			return seq
		}
		if i%yieldEvery != 0 {
			continue
		}
		runtime.Gosched()
		if i%(16*yieldEvery) != 0 {
			continue
		}
		if start.IsZero() {
			start = time.Now()
			continue
		}
		if time.Since(start) < workerSpin {
			continue
		}
		// Park. The owner bumps seq and then clears parked; here parked is
		// set and then seq read again. Whichever clears parked owns the
		// wake-up: the owner sends a token, or the helper goes on itself.
		h.parked.Store(true)
		if seq := w.seq.Load(); seq != seen && h.parked.CompareAndSwap(true, false) {
			return seq
		}
		<-h.wake
		i, start = 0, time.Time{}
	}
}

// start hands the current job (w.job, or quit) to every helper.
func (w *Workers) start() {
	w.pending.Store(int64(len(w.helpers)))
	w.seq.Add(1)
	for i := range w.helpers {
		h := &w.helpers[i]
		if h.parked.Load() && h.parked.CompareAndSwap(true, false) {
			h.wake <- struct{}{}
		}
	}
}

// wait returns once every helper has finished the current job, polling and
// yielding to other goroutines (a helper may need this goroutine's core).
func (w *Workers) wait() {
	for i := 1; w.pending.Load() != 0; i++ {
		if i%yieldEvery == 0 {
			runtime.Gosched()
		}
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
	if len(w.helpers) > 0 {
		w.quit = true
		w.start()
		w.wait()
	}
}

// For runs r over [0, n) in chunks of grain indices (grain <= 0 picks a
// chunk size from n and the pool size) and returns when all are done.
func (w *Workers) For(n, grain int, r Ranger) {
	if n <= 0 {
		return
	}
	w.run(n, grain, r, nil)
}

// forSlots is For for a job with per-worker scratch.
func (w *Workers) forSlots(n, grain int, s slotRanger) {
	if n <= 0 {
		return
	}
	w.run(n, grain, nil, s)
}

func (w *Workers) run(n, grain int, r Ranger, s slotRanger) {
	p := w.N()
	if grain <= 0 {
		grain = max(1, (n+4*p-1)/(4*p))
	}
	if (n+grain-1)/grain > maxChunks {
		grain = (n + maxChunks - 1) / maxChunks
	}
	chunks := (n + grain - 1) / grain
	if p == 1 || chunks == 1 {
		if s != nil {
			s.rangeSlot(0, 0, n)
		} else {
			r.Range(0, n)
		}
		return
	}
	j := &w.job
	j.r, j.s, j.n, j.grain, j.chunks = r, s, n, grain, chunks
	for i := range j.spans {
		j.spans[i].v.Store(packSpan(i*chunks/p, (i+1)*chunks/p))
	}
	w.start()
	j.run(0)
	w.wait()
	j.r, j.s = nil, nil
}
