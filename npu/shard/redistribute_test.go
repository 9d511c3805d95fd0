package shard

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// Every rank receives exactly its box of the whole tensor, bit for bit,
// between any two layouts: splits along either dimension, repeated slices,
// different device matrices.
func TestRedistributeBetweenLayouts(t *testing.T) {
	const d = 8
	shape := []int{8, 12}
	layouts := []parallel.Layout{
		{DeviceMatrix: []int{8}, TensorMap: []int{0, -1}},
		{DeviceMatrix: []int{8}, TensorMap: []int{-1, -1}},
		{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, 0}},
		{DeviceMatrix: []int{4, 2}, TensorMap: []int{-1, 0}},
		{DeviceMatrix: []int{2, 2, 2}, TensorMap: []int{0, 2}},
		{DeviceMatrix: []int{1, 2, 4}, TensorMap: []int{-1, 0}},
	}
	whole := make([]float32, volume(shape))
	for i := range whole {
		whole[i] = float32(i) + 0.5
	}
	for i := range layouts {
		layouts[i].Shape = shape
		if err := layouts[i].Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for _, from := range layouts {
		for _, to := range layouts {
			t.Run(fmt.Sprintf("%v%v to %v%v", from.DeviceMatrix, from.TensorMap, to.DeviceMatrix, to.TensorMap), func(t *testing.T) {
				comms := memComms(d)
				errs := make([]error, d)
				var wg sync.WaitGroup
				for r := range d {
					wg.Add(1)
					go func(r int) {
						defer wg.Done()
						errs[r] = func() error {
							p, err := newPlan(from, to, r)
							if err != nil {
								return err
							}
							if want := slices.Equal(from.DeviceMatrix, to.DeviceMatrix) && slices.Equal(from.TensorMap, to.TensorMap); want && !p.identity {
								return fmt.Errorf("the same layout is not an identity plan")
							}
							b, _ := from.Box(r)
							src, err := tensor.New(b.Shape...)
							if err != nil {
								return err
							}
							parallel.CopyBox(src.Data(), b.Shape, nil, whole, shape, b.Offset, b.Shape)
							got, err := p.run(context.Background(), comms[r], src)
							if err != nil {
								return err
							}
							want, _ := to.Box(r)
							if !got.HasShape(want.Shape...) {
								return fmt.Errorf("slice %v, want %v", got.Shape(), want.Shape)
							}
							exp := make([]float32, volume(want.Shape))
							parallel.CopyBox(exp, want.Shape, nil, whole, shape, want.Offset, want.Shape)
							for i, v := range got.Data() {
								if math.Float32bits(v) != math.Float32bits(exp[i]) {
									return fmt.Errorf("element %d is %v, want %v", i, v, exp[i])
								}
							}
							return nil
						}()
					}(r)
				}
				wg.Wait()
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
	if _, err := newPlan(layouts[0], parallel.Layout{DeviceMatrix: []int{4}, TensorMap: []int{0, -1}, Shape: shape}, 0); err == nil {
		t.Error("a plan between 8 and 4 devices")
	}
}

// A rank never reads a box from another rank when it holds it itself, and
// reads from the replicas in turn otherwise.
func TestRedistributeReadsLocalFirst(t *testing.T) {
	shape := []int{8, 4}
	repl := parallel.Layout{DeviceMatrix: []int{4}, TensorMap: []int{-1, -1}, Shape: shape}
	split := parallel.Layout{DeviceMatrix: []int{4}, TensorMap: []int{0, -1}, Shape: shape}
	p, err := newPlan(repl, split, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.local) != 1 || slices.ContainsFunc(p.recv, func(ps []piece) bool { return len(ps) > 0 }) {
		t.Errorf("replicated to split: local %v, receives %v", p.local, p.recv)
	}
	// Split to replicated: rank 2 receives every other quarter from its
	// holder, one piece from each.
	p, err = newPlan(split, repl, 2)
	if err != nil {
		t.Fatal(err)
	}
	for q, ps := range p.recv {
		if want := 1; q != 2 && len(ps) != want {
			t.Errorf("receives %d pieces from rank %d, want %d", len(ps), q, want)
		}
	}
}
