package parallel

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Tensor map entries count device matrix axes from the right; ranks are
// row-major coordinates.
func TestLayoutBoxes(t *testing.T) {
	l := Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, -1}, Shape: []int{8, 3}}
	var got []string
	for r := range l.Devices() {
		b, err := l.Box(r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(b.Offset, b.Shape))
	}
	// Dimension 0 splits along axis 0 (2 ways); axis 1 (4 ways) repeats.
	want := []string{
		"[0 0] [4 3]", "[0 0] [4 3]", "[0 0] [4 3]", "[0 0] [4 3]",
		"[4 0] [4 3]", "[4 0] [4 3]", "[4 0] [4 3]", "[4 0] [4 3]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("boxes %q, want %q", got, want)
	}

	// The seeds' MatMul weight [512, 128] with strategy (1, 2) on 8
	// devices: a leading repeat axis of 4, columns split in two.
	w, err := SplitLayout([]int{512, 128}, []int{1, 2}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.DeviceMatrix, []int{4, 1, 2}) || !slices.Equal(w.TensorMap, []int{1, 0}) {
		t.Fatalf("layout %+v, want dev_matrix [4 1 2], tensor_map [1 0]", w)
	}
	for r, off := range []int{0, 64, 0, 64, 0, 64, 0, 64} {
		b, err := w.Box(r)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b.Offset, []int{0, off}) || !slices.Equal(b.Shape, []int{512, 64}) {
			t.Errorf("rank %d: box %v, want offset [0 %d] shape [512 64]", r, b, off)
		}
	}
}

// Every element of the tensor is held by the same number of ranks: the
// slices tile the tensor, each repeated devices/used times.
func TestLayoutSlicesTileTheTensor(t *testing.T) {
	for _, l := range []Layout{
		{DeviceMatrix: []int{2, 2, 2}, TensorMap: []int{0, 2, -1}, Shape: []int{4, 6, 5}},
		{DeviceMatrix: []int{8}, TensorMap: []int{-1, 0}, Shape: []int{3, 16}},
		{DeviceMatrix: []int{3, 2}, TensorMap: []int{1, 0}, Shape: []int{9, 4}},
	} {
		count := make([]int, l.Shape[0]*l.Shape[1]*max(1, product(l.Shape[2:])))
		repeat := l.Devices()
		for _, m := range l.TensorMap {
			if m >= 0 {
				repeat /= l.DeviceMatrix[len(l.DeviceMatrix)-1-m]
			}
		}
		for r := range l.Devices() {
			b, err := l.Box(r)
			if err != nil {
				t.Fatal(err)
			}
			forEach(b, func(idx []int) { count[flat(l.Shape, idx)]++ })
		}
		for i, c := range count {
			if c != repeat {
				t.Fatalf("layout %+v: element %d held %d times, want %d", l, i, c, repeat)
			}
		}
	}
}

func TestLayoutErrors(t *testing.T) {
	for _, tc := range []struct {
		l    Layout
		want string
	}{
		{Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{0, 1}, Shape: []int{6, 8}}, "dimension 0 of shape [6 8] is 6, not divisible into 4 slices"},
		{Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{0}, Shape: []int{8, 6}}, "tensor map [0] has 1 entries for a tensor of 2 dimensions"},
		{Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{2, -1}, Shape: []int{8, 6}}, "entry 0 is 2, want -1 or 0 to 1"},
		{Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{0, 0}, Shape: []int{8, 8}}, "device matrix axis 1 splits two dimensions"},
		{Layout{DeviceMatrix: []int{2, 0}, TensorMap: []int{-1}, Shape: []int{8}}, "axis 1 is 0, want at least 1"},
		{Layout{TensorMap: []int{-1}, Shape: []int{8}}, "empty device matrix"},
	} {
		_, err := tc.l.Box(0)
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.l, err, tc.want)
		}
	}
	l := Layout{DeviceMatrix: []int{2}, TensorMap: []int{0}, Shape: []int{4}}
	if _, err := l.Box(2); err == nil || !strings.Contains(err.Error(), "rank 2 is outside device matrix [2] of 2 devices") {
		t.Errorf("rank 2 of 2: %v", err)
	}
}

func TestBoxIntersect(t *testing.T) {
	a := Box{Offset: []int{0, 4}, Shape: []int{4, 4}}
	b := Box{Offset: []int{2, 0}, Shape: []int{4, 6}}
	got, ok := a.Intersect(b)
	if !ok || !slices.Equal(got.Offset, []int{2, 4}) || !slices.Equal(got.Shape, []int{2, 2}) {
		t.Errorf("intersect = %v, %v; want offset [2 4] shape [2 2]", got, ok)
	}
	if _, ok := a.Intersect(Box{Offset: []int{4, 0}, Shape: []int{2, 8}}); ok {
		t.Error("touching boxes overlap")
	}
}

func product(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

func flat(shape, idx []int) int {
	i := 0
	for k := range shape {
		i = i*shape[k] + idx[k]
	}
	return i
}

func forEach(b Box, f func([]int)) {
	idx := slices.Clone(b.Offset)
	for {
		f(idx)
		k := len(idx) - 1
		for ; k >= 0; k-- {
			if idx[k]++; idx[k] < b.Offset[k]+b.Shape[k] {
				break
			}
			idx[k] = b.Offset[k]
		}
		if k < 0 {
			return
		}
	}
}
