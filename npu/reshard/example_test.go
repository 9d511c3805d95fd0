package reshard_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
)

// Two ranks each hold two rows of a [4, 2] weight; Merge integrates them
// into one checkpoint, as MindSpore's merge_sliced_parameter does.
func ExampleMerge() {
	dir, _ := os.MkdirTemp("", "reshard-example")
	defer os.RemoveAll(dir)
	src := reshard.Source{Placements: map[string]reshard.Placement{
		"fc.weight": {Shape: []int{4, 2}, Boxes: []parallel.Box{
			{Offset: []int{0, 0}, Shape: []int{2, 2}},
			{Offset: []int{2, 0}, Shape: []int{2, 2}},
		}},
	}}
	for r, rows := range [][]float32{{1, 2, 3, 4}, {5, 6, 7, 8}} {
		w, _ := ckpt.NewFloat32("fc.weight", []int64{2, 2}, rows)
		m, _ := ckpt.NewFloat32("moments.fc.weight", []int64{2, 2}, rows) // follows fc.weight's placement
		lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
		path := filepath.Join(dir, fmt.Sprintf("rank_%d.ckpt", r))
		if err := ckpt.Write(path, []ckpt.Tensor{w, m, lr}, ckpt.WriteOptions{CRC: true}); err != nil {
			fmt.Println(err)
			return
		}
		src.Files = append(src.Files, path)
	}
	manifest, err := reshard.Merge(context.Background(), src, filepath.Join(dir, "out"), "merged.ckpt", reshard.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	tensors, _ := ckpt.Read(filepath.Join(dir, "out", "merged.ckpt"))
	for i, t := range tensors {
		v, _ := t.Float32s()
		fmt.Println(t.Name, t.Dims, v, manifest.Tensors[i].SHA256 == t.Hash())
	}
	// Output:
	// fc.weight [4 2] [1 2 3 4 5 6 7 8] true
	// moments.fc.weight [4 2] [1 2 3 4 5 6 7 8] true
	// learning_rate [] [0.01] true
}
