package parallel

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func box(offset, shape []int) Box { return Box{Offset: offset, Shape: shape} }

func TestBoxes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout TensorLayout
		shape  []int
		want   []Box
	}{
		{
			// The package example: rank 5 is coordinate (1, 1), rows 4-7.
			name:   "even with repeat",
			layout: TensorLayout{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, -1}},
			shape:  []int{8, 3},
			want: []Box{
				box([]int{0, 0}, []int{4, 3}), box([]int{0, 0}, []int{4, 3}), box([]int{0, 0}, []int{4, 3}), box([]int{0, 0}, []int{4, 3}),
				box([]int{4, 0}, []int{4, 3}), box([]int{4, 0}, []int{4, 3}), box([]int{4, 0}, []int{4, 3}), box([]int{4, 0}, []int{4, 3}),
			},
		},
		{
			// The seeds' MatMul ((1, 1), (1, 2)) weight on 4 devices.
			name:   "seeds matmul weight",
			layout: TensorLayout{DeviceMatrix: []int{2, 1, 1, 2}, TensorMap: []int{1, 0}},
			shape:  []int{512, 128},
			want: []Box{
				box([]int{0, 0}, []int{512, 64}), box([]int{0, 64}, []int{512, 64}),
				box([]int{0, 0}, []int{512, 64}), box([]int{0, 64}, []int{512, 64}),
			},
		},
		{
			name:   "uneven with repeat",
			layout: TensorLayout{DeviceMatrix: []int{2, 4}, TensorMap: []int{0, -1}, ParamSplitShape: []int{3, 5, 2, 6}, IndicesOffset: []int{0, 3, 8, 10}},
			shape:  []int{16, 4},
			want: []Box{
				box([]int{0, 0}, []int{3, 4}), box([]int{3, 0}, []int{5, 4}), box([]int{8, 0}, []int{2, 4}), box([]int{10, 0}, []int{6, 4}),
				box([]int{0, 0}, []int{3, 4}), box([]int{3, 0}, []int{5, 4}), box([]int{8, 0}, []int{2, 4}), box([]int{10, 0}, []int{6, 4}),
			},
		},
		{
			// Uneven along the leading device axis: ranks 0-1 hold slice 0.
			name:   "uneven on the leading axis",
			layout: TensorLayout{DeviceMatrix: []int{2, 2}, TensorMap: []int{1}, ParamSplitShape: []int{7, 1}, IndicesOffset: []int{0, 7}},
			shape:  []int{8},
			want:   []Box{box([]int{0}, []int{7}), box([]int{0}, []int{7}), box([]int{7}, []int{1}), box([]int{7}, []int{1})},
		},
		{
			// 8 devices: 2 model-parallel slices of 4 rows, each shared by
			// 2 optimizer shards of 2 rows, repeated twice. Rank r holds
			// slice r%2, shard (r/2)%2.
			name:   "optimizer sharding",
			layout: TensorLayout{DeviceMatrix: []int{4, 2}, TensorMap: []int{0, -1}, OptWeightShardStep: 2, OptWeightShardSize: 2},
			shape:  []int{8, 3},
			want: []Box{
				box([]int{0, 0}, []int{2, 3}), box([]int{4, 0}, []int{2, 3}), box([]int{2, 0}, []int{2, 3}), box([]int{6, 0}, []int{2, 3}),
				box([]int{0, 0}, []int{2, 3}), box([]int{4, 0}, []int{2, 3}), box([]int{2, 0}, []int{2, 3}), box([]int{6, 0}, []int{2, 3}),
			},
		},
		{
			name:   "scalar",
			layout: TensorLayout{DeviceMatrix: []int{2}, TensorMap: []int{}},
			shape:  []int{},
			want:   []Box{box([]int{}, []int{}), box([]int{}, []int{})},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.layout.Boxes(tc.shape)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("boxes\n%v\nwant\n%v", got, tc.want)
			}
			checkTiles(t, got, tc.shape)
		})
	}
}

// checkTiles checks that boxes cover every element of shape equally often
// and that two boxes are either equal or disjoint.
func checkTiles(t *testing.T, boxes []Box, shape []int) {
	t.Helper()
	n := 1
	for _, d := range shape {
		n *= d
	}
	count := make([]int, n)
	for i, b := range boxes {
		for j := range i {
			if common, ok := b.Intersect(boxes[j]); ok && !reflect.DeepEqual(common, b) {
				t.Fatalf("boxes %d %v and %d %v overlap partly", i, b, j, boxes[j])
			}
		}
		forEachIndex(b, func(idx []int) {
			flat := 0
			for k := range shape {
				flat = flat*shape[k] + idx[k]
			}
			count[flat]++
		})
	}
	for i, c := range count {
		if c != count[0] || c == 0 {
			t.Fatalf("element %d is covered %d times, element 0 %d times", i, c, count[0])
		}
	}
}

func forEachIndex(b Box, visit func([]int)) {
	idx := make([]int, len(b.Shape))
	for k := range b.Shape {
		if b.Shape[k] == 0 {
			return
		}
	}
	for {
		abs := make([]int, len(idx))
		for k := range idx {
			abs[k] = b.Offset[k] + idx[k]
		}
		visit(abs)
		k := len(idx) - 1
		for ; k >= 0; k-- {
			if idx[k]++; idx[k] < b.Shape[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return
		}
	}
}

func TestBoxesErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout TensorLayout
		shape  []int
		want   string
	}{
		{"not divisible", TensorLayout{DeviceMatrix: []int{4}, TensorMap: []int{0, -1}}, []int{6, 2}, "not divisible into 4 slices"},
		{"wrong rank", TensorLayout{DeviceMatrix: []int{4}, TensorMap: []int{0, -1}}, []int{8}, "2 entries for a tensor of 1 dimensions"},
		{"uneven sum", TensorLayout{DeviceMatrix: []int{2}, TensorMap: []int{0}, ParamSplitShape: []int{3, 5}, IndicesOffset: []int{0, 3}}, []int{9}, "adds up to 8 rows, the tensor [9] has 9"},
		{"recorded shape differs", TensorLayout{DeviceMatrix: []int{2}, TensorMap: []int{0}, Shape: []int{4}}, []int{8}, "records tensor_shape [4]"},
		{"field split", TensorLayout{DeviceMatrix: []int{2}, TensorMap: []int{0, -1}, Field: 39}, []int{78, 8}, "field 39"},
		{"optimizer shard not divisible", TensorLayout{DeviceMatrix: []int{2, 2}, TensorMap: []int{0}, OptWeightShardStep: 2, OptWeightShardSize: 2}, []int{6}, "does not divide into opt_weight_shard_size 2"},
		{"negative dimension", TensorLayout{DeviceMatrix: []int{2}, TensorMap: []int{-1}}, []int{-2}, "dimension 0 is -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.layout.Boxes(tc.shape)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrLayout) {
				t.Fatalf("error %v, want one containing %q wrapping ErrLayout", err, tc.want)
			}
		})
	}
}

func TestLayoutOfTensorLayout(t *testing.T) {
	tl := TensorLayout{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, -1}, Shape: []int{8, 3}}
	got := tl.Layout([]int{8, 3})
	want := Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, -1}, Shape: []int{8, 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Layout = %+v, want %+v", got, want)
	}
	got.DeviceMatrix[0] = 99 // a copy: the strategy file's layout stays as read
	if tl.DeviceMatrix[0] != 2 {
		t.Fatal("Layout shares the device matrix with the TensorLayout")
	}
}

func TestTensorLayoutOfSplitLayout(t *testing.T) {
	// The seeds' MatMul weight strategy (1, 2) on 8 devices.
	l, err := SplitLayout([]int{512, 128}, []int{1, 2}, 8)
	if err != nil {
		t.Fatal(err)
	}
	tl := TensorLayoutOf(l)
	want := TensorLayout{DeviceMatrix: []int{4, 1, 2}, TensorMap: []int{1, 0}, Shape: []int{512, 128}}
	if !reflect.DeepEqual(tl, want) {
		t.Fatalf("TensorLayoutOf = %+v, want %+v", tl, want)
	}
	boxes, err := tl.Boxes(l.Shape)
	if err != nil {
		t.Fatal(err)
	}
	for r, b := range boxes {
		if even, _ := l.Box(r); !reflect.DeepEqual(b, even) {
			t.Fatalf("rank %d: box %v, Layout.Box %v", r, b, even)
		}
	}
	if boxes[3].Offset[1] != 64 || boxes[3].Shape[1] != 64 {
		t.Fatalf("rank 3 holds %v, want columns 64-127", boxes[3])
	}
}
