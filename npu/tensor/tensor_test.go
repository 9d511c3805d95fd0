package tensor

import (
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

func TestNewAndReshape(t *testing.T) {
	x, err := New(2, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	if x.Len() != 24 || x.Rank() != 3 || x.Dim(1) != 3 || x.Dim(5) != 0 || !x.HasShape(2, 3, 4) {
		t.Fatalf("New(2,3,4) = %v len %d", x, x.Len())
	}
	if err := x.Reshape(6, 4); err != nil || !x.HasShape(6, 4) {
		t.Fatalf("Reshape(6,4): %v, shape %v", err, x.Shape())
	}
	if err := x.Reshape(5, 5); !errors.Is(err, ErrShape) {
		t.Fatalf("Reshape(5,5) err = %v, want ErrShape", err)
	}
	if err := x.Reshape(2, 3, 2, 2); err != nil || x.String() != "tensor[2 3 2 2]" {
		t.Fatalf("Reshape to rank 4: %v %v", err, x)
	}
	for _, bad := range [][]int{{-1, 2}, {1 << 30, 1 << 30, 1 << 30}} {
		if _, err := New(bad...); !errors.Is(err, ErrInvalidShape) {
			t.Errorf("New(%v) err = %v, want ErrInvalidShape", bad, err)
		}
	}
	if _, err := FromSlice(make([]float32, 5), 2, 3); !errors.Is(err, ErrShape) {
		t.Fatalf("FromSlice(5 values, 2×3) err = %v", err)
	}
	empty, err := New(0, 3)
	if err != nil || empty.Len() != 0 {
		t.Fatalf("New(0,3) = %v, %v", empty, err)
	}
}

func TestElementwise(t *testing.T) {
	a, _ := FromSlice([]float32{1, 2, 3, 4}, 2, 2)
	b, _ := FromSlice([]float32{10, 20, 30, 40}, 2, 2)
	dst, _ := New(2, 2)
	if err := dst.Add(a, b); err != nil {
		t.Fatal(err)
	}
	if got := dst.Data(); got[0] != 11 || got[3] != 44 {
		t.Fatalf("a+b = %v", got)
	}
	if err := dst.Scale(0.5, dst); err != nil || dst.Data()[1] != 11 {
		t.Fatalf("scale: %v %v", err, dst.Data())
	}
	if err := dst.Copy(a); err != nil || dst.Data()[2] != 3 {
		t.Fatalf("copy: %v %v", err, dst.Data())
	}
	row, _ := New(4)
	if err := dst.Add(a, row); !errors.Is(err, ErrShape) {
		t.Fatalf("add 2×2 and 4: err = %v", err)
	}
	if err := row.Copy(a); !errors.Is(err, ErrShape) {
		t.Fatalf("copy 2×2 into 4: err = %v", err)
	}
	dst.Fill(2)
	if !dst.AllFinite() || dst.Data()[3] != 2 {
		t.Fatalf("fill: %v", dst.Data())
	}
	dst.Data()[0] = float32(math.Inf(-1))
	if dst.AllFinite() {
		t.Fatal("AllFinite true with -Inf")
	}
	dst.Zero()
	if dst.Data()[0] != 0 {
		t.Fatal("Zero left data")
	}
}

type countRange struct{ hits []int32 }

func (c *countRange) Range(lo, hi int) {
	for i := lo; i < hi; i++ {
		c.hits[i]++
	}
}

func TestWorkersForCoversEachIndexOnce(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		w := NewWorkers(n)
		for _, size := range []int{0, 1, 7, 1000} {
			for _, grain := range []int{0, 1, 3, 5000} {
				c := &countRange{hits: make([]int32, size)}
				w.For(size, grain, c)
				for i, h := range c.hits {
					if h != 1 {
						t.Fatalf("workers %d size %d grain %d: index %d ran %d times", n, size, grain, i, h)
					}
				}
			}
		}
		w.Close()
		w.Close()
		if w.N() != 1 {
			t.Fatalf("closed pool N = %d", w.N())
		}
		c := &countRange{hits: make([]int32, 10)}
		w.For(10, 1, c) // runs inline after Close
		if c.hits[9] != 1 {
			t.Fatal("For after Close did not run")
		}
	}
	var nilPool *Workers
	if nilPool.N() != 1 {
		t.Fatal("nil pool N != 1")
	}
}

func TestWorkersForAllocatesNothing(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	c := &countRange{hits: make([]int32, 64)}
	a, b, out := make([]float32, 64*64), make([]float32, 64*512), make([]float32, 64*512)
	allocs := testing.AllocsPerRun(20, func() {
		w.For(64, 1, c)
		w.Gemm(false, false, 64, 512, 64, 1, a, 64, b, 512, 0, out, 512)
	})
	if allocs != 0 {
		t.Fatalf("For + Gemm allocate %v times per run", allocs)
	}
}

// slotLog records which worker ran each index, taking each a while when
// pace is set; the first index worker 1 gets holds it up much longer when
// slow is set, as a core busy with other work would.
type slotLog struct {
	slots []int32
	pace  time.Duration
	slow  atomic.Bool
}

func (s *slotLog) rangeSlot(slot, lo, hi int) {
	if slot == 1 && s.slow.CompareAndSwap(true, false) {
		time.Sleep(200 * time.Millisecond)
	}
	for i := lo; i < hi; i++ {
		time.Sleep(s.pace)
		s.slots[i] = int32(slot) + 1
	}
}

// TestWorkersShareWithAffinity checks that each index runs once on a valid
// worker, that the workers' shares are contiguous, and that the owner takes
// over the share of a helper that does not get to it.
func TestWorkersShareWithAffinity(t *testing.T) {
	w := NewWorkers(2)
	defer w.Close()
	s := &slotLog{slots: make([]int32, 16)}
	w.forSlots(16, 1, s)
	for i, v := range s.slots {
		if v < 1 || v > 2 {
			t.Fatalf("index %d ran on slot %d", i, v-1)
		}
	}
	s = &slotLog{slots: make([]int32, 16), pace: 2 * time.Millisecond}
	s.slow.Store(true)
	w.forSlots(16, 1, s)
	owner := 0
	for _, v := range s.slots {
		if v == 1 {
			owner++
		}
	}
	// The helper takes one index and sleeps; the owner does its half and
	// steals the rest of the helper's instead of waiting for it.
	if owner < 14 {
		t.Fatalf("owner ran %d of 16 indices while the helper was held up: %v", owner, s.slots)
	}
}

// TestWorkersParkAndWake checks that idle helpers stop polling after a
// while and still take part in the next job, and that Close stops them.
func TestWorkersParkAndWake(t *testing.T) {
	w := NewWorkers(3)
	c := &countRange{hits: make([]int32, 100)}
	w.For(100, 1, c)
	deadline := time.Now().Add(10 * time.Second)
	for i := range w.helpers {
		for !w.helpers[i].parked.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("helper %d still polling after 10 s without work", i+1)
			}
			time.Sleep(time.Millisecond)
		}
	}
	s := &slotLog{slots: make([]int32, 300)}
	w.forSlots(300, 1, s)
	for i, v := range s.slots {
		if v < 1 || v > 3 {
			t.Fatalf("after parking: index %d ran on slot %d", i, v-1)
		}
	}
	w.Close()
	if n := w.pending.Load(); n != 0 {
		t.Fatalf("Close returned with %d helpers running", n)
	}
}
