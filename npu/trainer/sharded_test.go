package trainer

import (
	"errors"
	"slices"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// Cutting a whole tensor into every rank's slice and placing the slices
// back gives the tensor again, for layouts that split one, two or no
// dimensions, with repeated ranks.
func TestSliceAndPlaceRoundTrip(t *testing.T) {
	for _, l := range []parallel.Layout{
		{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, 0}, Shape: []int{6, 8}},
		{DeviceMatrix: []int{4, 2}, TensorMap: []int{-1, 0, -1}, Shape: []int{3, 4, 5}},
		{DeviceMatrix: []int{8}, TensorMap: []int{-1}, Shape: []int{7}},
		{DeviceMatrix: []int{2, 2, 2}, TensorMap: []int{0, 2, -1, 1}, Shape: []int{2, 4, 3, 2}},
	} {
		whole := make([]float32, shapeLen(l.Shape))
		for i := range whole {
			whole[i] = float32(i + 1)
		}
		back := make([]float32, len(whole))
		for r := 0; r < l.Devices(); r++ {
			box, err := l.Box(r)
			if err != nil {
				t.Fatal(err)
			}
			part := make([]float32, shapeLen(box.Shape))
			sliceOf(whole, l.Shape, box, part)
			// The first element of the slice is the whole tensor's element
			// at the box's offset.
			off := 0
			for k := range l.Shape {
				off = off*l.Shape[k] + box.Offset[k]
			}
			if part[0] != whole[off] {
				t.Fatalf("%v rank %d: slice starts with %v, want %v", l.TensorMap, r, part[0], whole[off])
			}
			parallel.CopyBox(back, l.Shape, box.Offset, part, box.Shape, nil, box.Shape)
		}
		if !slices.Equal(back, whole) {
			t.Errorf("layout %v %v: slices placed back differ from the whole tensor", l.DeviceMatrix, l.TensorMap)
		}
	}
}

func TestWholeToSlice(t *testing.T) {
	l := parallel.Layout{DeviceMatrix: []int{2, 2}, TensorMap: []int{-1, 0}, Shape: []int{2, 4}}
	whole, _ := ckpt.NewFloat32("fc.weight", []int64{2, 4}, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	box3, _ := l.Box(3)
	cut, err := wholeToSlice(whole, l, box3, []int{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := cut.Float32s(); !slices.Equal(v, []float32{3, 4, 7, 8}) || !slices.Equal(cut.Dims, []int64{2, 2}) {
		t.Errorf("rank 3's slice %v %v, want [3 4 7 8] of [2 2]", v, cut.Dims)
	}
	other, _ := ckpt.NewFloat32("fc.weight", []int64{4, 2}, make([]float32, 8))
	box0, _ := l.Box(0)
	if _, err := wholeToSlice(other, l, box0, []int{2, 2}); !errors.Is(err, errNotWhole) {
		t.Errorf("a [4 2] tensor for a [2 4] parameter: %v", err)
	}
	// An optimizer piece: rank 3's slice cut along dimension 0 in two,
	// the second row.
	piece := parallel.Box{Offset: []int{1, 2}, Shape: []int{1, 2}}
	if cut, err := wholeToSlice(whole, l, piece, []int{1, 2}); err != nil {
		t.Fatal(err)
	} else if v, _ := cut.Float32s(); !slices.Equal(v, []float32{7, 8}) {
		t.Errorf("rank 3's optimizer piece %v, want [7 8]", v)
	}
}
