package ckptset

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

func TestWholeShape(t *testing.T) {
	for _, tc := range []struct {
		l     parallel.TensorLayout
		slice []int64
		want  []int
	}{
		{parallel.TensorLayout{DeviceMatrix: []int{4, 1}, TensorMap: []int{1, 0}}, []int64{2, 8}, []int{8, 8}},
		{parallel.TensorLayout{DeviceMatrix: []int{2, 2, 2}, TensorMap: []int{0, 2}}, []int64{3, 5}, []int{6, 10}},
		{parallel.TensorLayout{DeviceMatrix: []int{3}, TensorMap: []int{0, -1}, ParamSplitShape: []int{2, 3, 5}, IndicesOffset: []int{0, 2, 5}}, []int64{2, 4}, []int{10, 4}},
		{parallel.TensorLayout{DeviceMatrix: []int{4}, TensorMap: []int{-1, -1}, OptWeightShardStep: 1, OptWeightShardSize: 4}, []int64{2, 3}, []int{8, 3}},
		{parallel.TensorLayout{DeviceMatrix: []int{2}, TensorMap: []int{0}, Shape: []int{7}}, []int64{4}, []int{7}},
	} {
		got, err := WholeShape(tc.l, tc.slice)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("WholeShape(%+v, %v) = %v, %v; want %v", tc.l, tc.slice, got, err, tc.want)
		}
	}
	if _, err := WholeShape(parallel.TensorLayout{DeviceMatrix: []int{2}, TensorMap: []int{0}}, []int64{2, 2}); err == nil || !strings.Contains(err.Error(), "1 entries, rank 0 holds a tensor of 2 dimensions") {
		t.Errorf("rank mismatch: %v", err)
	}
}

func TestOpenAndStrategyForDevices(t *testing.T) {
	root := t.TempDir()
	for r := range 4 {
		w, _ := ckpt.NewFloat32("fc.weight", []int64{2, 6}, make([]float32, 12))
		m, _ := ckpt.NewFloat32("moments.fc.weight", []int64{2, 6}, make([]float32, 12))
		b, _ := ckpt.NewFloat32("fc.bias", []int64{6}, make([]float32, 6))
		lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.1})
		if _, err := WriteRank(root, r, "CKP-1_1.ckpt", []ckpt.Tensor{w, m, b, lr}); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := Find(root, "")
	sf := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{
		"fc.weight": {DeviceMatrix: []int{4}, TensorMap: []int{0, -1}},
	}}
	s, err := Open(files, sf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Shapes["fc.weight"], []int{8, 6}) || !reflect.DeepEqual(s.Shapes["moments.fc.weight"], []int{8, 6}) || len(s.Source.Placements) != 1 {
		t.Fatalf("shapes %v, placements %v", s.Shapes, s.Source.Placements)
	}
	got := s.StrategyForDevices(2)
	want := map[string]parallel.TensorLayout{
		"fc.weight": {DeviceMatrix: []int{2}, TensorMap: []int{0, -1}},
		"fc.bias":   {DeviceMatrix: []int{2}, TensorMap: []int{-1}},
	}
	if !reflect.DeepEqual(got.Layouts, want) {
		t.Fatalf("StrategyForDevices(2) = %+v, want %+v", got.Layouts, want)
	}
	// 8 rows do not split into 3: the rule keeps fc.weight whole.
	if l := s.StrategyForDevices(3).Layouts["fc.weight"]; !reflect.DeepEqual(l.TensorMap, []int{-1, -1}) {
		t.Fatalf("3 devices: %+v", l)
	}
	if _, err := Open(files[:3], sf); err == nil || !strings.Contains(err.Error(), "strategy file is for 4 devices, the set has 3 ranks") {
		t.Fatalf("3 of 4 ranks: %v", err)
	}
	// A layout for a tensor the set does not hold is refused, naming it:
	// it was skipped, and a strategy file of another network merged.
	unsaved := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{
		"fc.weight": {DeviceMatrix: []int{4}, TensorMap: []int{0, -1}},
		"unsaved":   {DeviceMatrix: []int{4}, TensorMap: []int{0}},
	}}
	if _, err := Open(files, unsaved); !errors.Is(err, ErrLayoutMismatch) || !strings.Contains(err.Error(), `"unsaved": no such tensor in `+files[0]) {
		t.Fatalf("layout of a missing tensor: %v", err)
	}
	bad := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{"fc.weight": {DeviceMatrix: []int{4}, TensorMap: []int{0}}}}
	if _, err := Open(files, bad); err == nil || !strings.Contains(err.Error(), `strategy layout of "fc.weight"`) {
		t.Fatalf("layout of the wrong rank: %v", err)
	}
}
