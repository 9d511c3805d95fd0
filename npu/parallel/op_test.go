package parallel

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// seedsMatMul is the seeds' SemiAutoParallelNet MatMul: x[32,512]·w[512,128].
func seedsMatMul() OpSpec {
	return OpSpec{
		Name: "fc.matmul", Kind: OpMatMul, Splittable: "nkm",
		Inputs: []TensorSpec{{Shape: []int{32, 512}, Labels: "nk"}, {Name: "fc.weight", Shape: []int{512, 128}, Labels: "km"}},
		Output: TensorSpec{Shape: []int{32, 128}, Labels: "nm"},
	}
}

func TestShardSeedsMatMul(t *testing.T) {
	ol, err := seedsMatMul().Shard([][]int{{1, 1}, {1, 2}}, 8)
	if err != nil {
		t.Fatal(err)
	}
	// 2 devices split m; 4 repeat the calculation.
	if !slices.Equal(ol.DeviceMatrix, []int{4, 1, 1, 2}) || ol.Used != 2 || ol.RepeatAxis != 0 {
		t.Fatalf("device matrix %v used %d repeat axis %d", ol.DeviceMatrix, ol.Used, ol.RepeatAxis)
	}
	w := ol.Inputs[1]
	if b, _ := w.Box(5); !slices.Equal(b.Offset, []int{0, 64}) || !slices.Equal(b.Shape, []int{512, 64}) {
		t.Errorf("weight box of rank 5: %+v", b)
	}
	if b, _ := ol.Inputs[0].Box(3); !slices.Equal(b.Shape, []int{32, 512}) {
		t.Errorf("x is not split, rank 3 holds %+v", b)
	}
	if len(ol.OutputPartial) != 0 {
		t.Errorf("output partial over %v, want none (k is not split)", ol.OutputPartial)
	}
	// dx = dy·wᵀ sums over m, which is split: partial over m's axis (3).
	if !slices.Equal(ol.GradPartial[0], []int{3}) || len(ol.GradPartial[1]) != 0 {
		t.Errorf("gradient partial axes %v", ol.GradPartial)
	}
	g, err := ol.Output.Group(5, ol.GradPartial[0])
	if err != nil || !slices.Equal(g, []int{4, 5}) {
		t.Errorf("group of rank 5 over axis 3: %v %v", g, err)
	}
}

func TestShardContractionIsPartial(t *testing.T) {
	ol, err := seedsMatMul().Shard([][]int{{2, 2}, {2, 1}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ol.DeviceMatrix, []int{2, 2, 1}) || !slices.Equal(ol.OutputPartial, []int{1}) {
		t.Fatalf("device matrix %v output partial %v", ol.DeviceMatrix, ol.OutputPartial)
	}
	// The weight's gradient sums over the batch, split along axis 0.
	if !slices.Equal(ol.GradPartial[1], []int{0}) {
		t.Errorf("weight gradient partial %v, want [0]", ol.GradPartial[1])
	}
}

func TestShardRefusals(t *testing.T) {
	for _, tc := range []struct {
		strategy [][]int
		devices  int
		want     string
	}{
		{[][]int{{1, 2}, {1, 2}}, 8, "another input splits the same dimension 2 ways"},
		{[][]int{{1, 1}, {1, 3}}, 8, "uses 3 devices, which does not divide the job's 8"},
		{[][]int{{1, 1}}, 8, "the strategy has 1 entries, the operator has 2 inputs"},
		{[][]int{{1, 1, 1}, {1, 1}}, 8, "input 0 has 2 dimensions"},
		{[][]int{{1, 1}, {1, 0}}, 8, "split 0 ways"},
		{[][]int{{1, 1}, {1, 256}}, 256, "not divisible into 256 slices"},
	} {
		_, err := seedsMatMul().Shard(tc.strategy, tc.devices)
		if !errors.Is(err, ErrStrategy) && !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v on %d: %v, want %q", tc.strategy, tc.devices, err, tc.want)
		}
	}
	conv := OpSpec{Name: "conv1", Kind: OpConv2D, Splittable: "no",
		Inputs: []TensorSpec{{Shape: []int{8, 3, 32, 32}, Labels: "nchw"}, {Name: "conv1.weight", Shape: []int{16, 3, 3, 3}, Labels: "ocij"}},
		Output: TensorSpec{Shape: []int{8, 16, 32, 32}, Labels: "nohw"}}
	if _, err := conv.Shard([][]int{{1, 1, 2, 1}, {1, 1, 1, 1}}, 2); err == nil || !strings.Contains(err.Error(), "cannot be split (only input dimension 0, conv1.weight dimension 0)") {
		t.Errorf("height split: %v", err)
	}
	if _, err := conv.Shard([][]int{{2, 1, 1, 1}, {2, 1, 1, 1}}, 4); err != nil {
		t.Errorf("batch and output-channel split: %v", err)
	}
}

func TestGraphShard(t *testing.T) {
	relu := OpSpec{Name: "relu", Kind: OpReLU, Splittable: "nm",
		Inputs: []TensorSpec{{Shape: []int{32, 128}, Labels: "nm"}}, Output: TensorSpec{Shape: []int{32, 128}, Labels: "nm"}}
	g := Graph{Model: "net", Ops: []OpSpec{seedsMatMul(), relu}}
	ols, err := g.Shard(Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	// relu has no strategy: data parallel over all four devices.
	if b, _ := ols[1].Inputs[0].Box(3); !slices.Equal(b.Offset, []int{24, 0}) || !slices.Equal(b.Shape, []int{8, 128}) {
		t.Errorf("relu box of rank 3: %+v", b)
	}
	_, err = g.Shard(Strategy{"fc.matmull": {{1, 1}, {1, 2}}, "relu": {{3, 1}}}, 4)
	if !errors.Is(err, ErrStrategy) || !strings.Contains(err.Error(), `net has no operator "fc.matmull" (operators: fc.matmul, relu)`) || !strings.Contains(err.Error(), "operator relu (ReLU): the strategy uses 3 devices") {
		t.Errorf("unknown operator and bad split: %v", err)
	}
	shared := seedsMatMul()
	shared.Name = "fc2.matmul"
	g = Graph{Model: "net", Ops: []OpSpec{seedsMatMul(), shared}}
	if _, err := g.Shard(Strategy{"fc.matmul": {{1, 1}, {1, 2}}, "fc2.matmul": {{2, 1}, {1, 1}}}, 2); err == nil || !strings.Contains(err.Error(), "parameter fc.weight is used by fc.matmul and fc2.matmul with different strategies") {
		t.Errorf("inconsistent shared parameter: %v", err)
	}
}

func TestParamLayouts(t *testing.T) {
	g := Graph{Model: "net", Ops: []OpSpec{seedsMatMul()}}
	ols, err := g.Shard(Strategy{"fc.matmul": {{1, 1}, {1, 2}}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	ls := ParamLayouts(g, ols)
	if len(ls) != 1 || !slices.Equal(ls["fc.weight"].TensorMap, []int{-1, 0}) || !slices.Equal(ls["fc.weight"].DeviceMatrix, []int{1, 1, 2}) {
		t.Errorf("layouts %+v", ls)
	}
}
