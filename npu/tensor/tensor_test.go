package tensor

import (
	"errors"
	"math"
	"testing"
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
