package parallel

import (
	"errors"
	"strings"
	"testing"
)

// Repeats counts the ranks holding each slice: the devices the tensor map
// leaves out.
func TestLayoutRepeats(t *testing.T) {
	for _, tc := range []struct {
		l    Layout
		want int
	}{
		{Layout{DeviceMatrix: []int{8}, TensorMap: []int{-1, -1}, Shape: []int{16, 4}}, 8},
		{Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{0, -1}, Shape: []int{16, 4}}, 2},
		{Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, 0}, Shape: []int{16, 4}}, 1},
		{Layout{DeviceMatrix: []int{3, 2}, TensorMap: []int{-1, 1}, Shape: []int{16, 6}}, 2},
	} {
		if got, err := tc.l.Repeats(); err != nil || got != tc.want {
			t.Errorf("%+v: %d, %v; want %d", tc.l, got, err, tc.want)
		}
	}
	if _, err := (Layout{DeviceMatrix: []int{3}, TensorMap: []int{0}, Shape: []int{4}}).Repeats(); !errors.Is(err, ErrLayout) {
		t.Errorf("uneven split: %v", err)
	}
}

// OptimizerPieces is MindSpore's rule: a frozen parameter, one no other
// rank holds, or one whose slice's dimension 0 does not divide stays
// whole; the shard size defaults to (and is capped at) the repeats and
// must divide them.
func TestOptimizerPieces(t *testing.T) {
	w := TensorSpec{Name: "fc.weight", Shape: []int{16, 4}}
	frozen := TensorSpec{Name: "bn.moving_mean", Shape: []int{16}, Frozen: true}
	for _, tc := range []struct {
		what                string
		t                   TensorSpec
		slice               []int
		repeats, size, want int
	}{
		{"all repeats", w, []int{16, 4}, 8, 0, 8},
		{"shard size 2", w, []int{16, 4}, 8, 2, 2},
		{"shard size over the repeats", w, []int{16, 4}, 4, 8, 4},
		{"frozen", frozen, []int{16}, 8, 0, 1},
		{"frozen, shard size 2", frozen, []int{16}, 8, 2, 1},
		{"held by one rank", w, []int{16, 4}, 1, 0, 1},
		{"dimension 0 does not divide", w, []int{12, 4}, 8, 0, 1},
		{"scalar", TensorSpec{Name: "s"}, nil, 8, 0, 1},
		{"shard size 1", w, []int{16, 4}, 8, 1, 1},
		{"shard size 3 of 6", w, []int{6, 4}, 6, 3, 3},
	} {
		if got, err := OptimizerPieces(tc.t, tc.slice, tc.repeats, tc.size); err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.what, got, err, tc.want)
		}
	}
	_, err := OptimizerPieces(w, []int{16, 4}, 4, 3)
	if !errors.Is(err, ErrOptimizerShard) || !strings.Contains(err.Error(), "fc.weight is repeated on 4 ranks, which optimizer_weight_shard_size 3 does not divide") {
		t.Errorf("shard size 3 of 4 repeats: %v", err)
	}
	// A frozen parameter has no moment to split: no error either.
	if got, err := OptimizerPieces(frozen, []int{16}, 4, 3); err != nil || got != 1 {
		t.Errorf("frozen, shard size 3 of 4 repeats: %d, %v", got, err)
	}
}
