package parallel

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestStrategyValidate(t *testing.T) {
	seeds := Strategy{"fc.matmul": {{1, 1}, {1, 2}}}
	for _, devices := range []int{2, 4, 8} {
		if err := seeds.Validate(devices); err != nil {
			t.Errorf("%d devices: %v", devices, err)
		}
	}
	bad := Strategy{
		"fc.matmul": {{1, 1}, {1, 3}},
		"conv1":     {{2, 0, 1, 1}},
		"relu":      {},
	}
	err := bad.Validate(8)
	if !errors.Is(err, ErrStrategy) {
		t.Fatalf("error %v, want ErrStrategy", err)
	}
	want := []string{
		"operator conv1 input 0: invalid shard strategy: [2 0 1 1]: dimension 1 is split 0 ways, want at least 1",
		"operator fc.matmul input 1: invalid shard strategy: [1 3] uses 3 devices, which does not divide the job's 8",
		"invalid shard strategy: operator relu: no inputs",
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("errors\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}
	if err := (Strategy{"x": {{1 << 11, 1 << 11}}}).Validate(8); err == nil || !strings.Contains(err.Error(), "more than 1048576 slices") {
		t.Errorf("huge strategy: %v", err)
	}
}

func TestStrategyLayouts(t *testing.T) {
	s := Strategy{"fc.matmul": {{1, 1}, {1, 2}}}
	ls, err := s.Layouts("fc.matmul", [][]int{{32, 512}, {512, 128}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ls[0].DeviceMatrix, []int{2, 1, 1}) || !slices.Equal(ls[1].DeviceMatrix, []int{1, 2}) || !slices.Equal(ls[1].TensorMap, []int{1, 0}) {
		t.Errorf("layouts %+v", ls)
	}
	// Without a strategy an operator runs data parallel: inputs split
	// along the batch dimension.
	ls, err = s.Layouts("relu", [][]int{{32, 128}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := ls[0].Box(3); !slices.Equal(b.Offset, []int{24, 0}) || !slices.Equal(b.Shape, []int{8, 128}) {
		t.Errorf("data parallel box of rank 3: %v", b)
	}
	for _, tc := range []struct {
		shapes [][]int
		want   string
	}{
		{[][]int{{32, 512}, {512, 127}}, "operator fc.matmul input 1: invalid layout: dimension 1 of shape [512 127] is 127, not divisible into 2 slices"},
		{[][]int{{32, 512}}, "operator fc.matmul has 1 inputs, the strategy gives 2"},
		{[][]int{{32, 512}, {512}}, "operator fc.matmul input 1: invalid shard strategy: [1 2] has 2 entries for a tensor of 1 dimensions [512]"},
	} {
		if _, err := s.Layouts("fc.matmul", tc.shapes, 2); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("shapes %v: %v, want %q", tc.shapes, err, tc.want)
		}
	}
}
