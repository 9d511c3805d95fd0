package ckpt

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
)

func TestStockProtocDecodesMspipeFile(t *testing.T) {
	ckpttest.ProtocPath(t)
	vals := make([]float32, 12)
	for i := range vals {
		vals[i] = float32(i)*0.25 - 1
	}
	w, _ := NewFloat32("fc.weight", []int64{3, 4}, vals)
	lr, _ := NewFloat32("learning_rate", nil, []float32{0.01})
	steps := Tensor{Name: "global_step", Dims: []int64{1}, DType: DTypeInt32, Data: []byte{7, 0, 0, 0}}
	path := filepath.Join(t.TempDir(), "CKP-1_4.ckpt")
	// 48 bytes over a 20-byte limit: 3 slices of 4 elements each. The
	// default options write no trailer: the file is protobuf throughout.
	if err := Write(path, []Tensor{w, lr, steps}, WriteOptions{SliceBytes: 20}); err != nil {
		t.Fatal(err)
	}
	got := ckpttest.DecodeFile(t, path)

	want := []ckpttest.Value{
		{Tag: "fc.weight", Dims: []int64{3, 4}, DType: "Float32", Content: w.Data[0:16]},
		{Tag: "fc.weight", Dims: []int64{3, 4}, DType: "Float32", Content: w.Data[16:32]},
		{Tag: "fc.weight", Dims: []int64{3, 4}, DType: "Float32", Content: w.Data[32:48]},
		{Tag: "learning_rate", Dims: []int64{0}, DType: "Float32", Content: lr.Data},
		{Tag: "global_step", Dims: []int64{1}, DType: "Int32", Content: steps.Data},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("protoc decoded\n%s\nwant\n%s", fmt.Sprint(got), fmt.Sprint(want))
	}
}

func TestMspipeDecodesStockProtocFile(t *testing.T) {
	// A file built by protoc from text, the way MindSpore lays it out: a
	// scalar as dims [0], a sliced tensor repeating its full dims.
	text := `
value { tag: "conv.weight" tensor { dims: 2 dims: 2 tensor_type: "Float16" tensor_content: "\000<\000@" } }
value { tag: "conv.weight" tensor { dims: 2 dims: 2 tensor_type: "Float16" tensor_content: "\000B\000D" } }
value { tag: "momentum" tensor { dims: 0 tensor_type: "Float32" tensor_content: "fff?" } }
`
	data := ckpttest.Protoc(t, []byte(text), "--encode=Checkpoint", "checkpoint.proto")
	f, err := DecodeFile("protoc.ckpt", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Values != 3 || len(f.Tensors) != 2 {
		t.Fatalf("%d values, %d tensors; want 3 values, 2 tensors", f.Values, len(f.Tensors))
	}
	conv, _ := f.Tensors[0].Float32s()
	if f.Tensors[0].Name != "conv.weight" || !reflect.DeepEqual(f.Tensors[0].Dims, []int64{2, 2}) || !reflect.DeepEqual(conv, []float32{1, 2, 3, 4}) {
		t.Fatalf("conv.weight = %v %v, want [2 2] [1 2 3 4]", f.Tensors[0].Dims, conv)
	}
	m, _ := f.Tensors[1].Float32s()
	if f.Tensors[1].Name != "momentum" || len(f.Tensors[1].Dims) != 0 || m[0] != 0.9 {
		t.Fatalf("momentum = %v %v, want scalar 0.9", f.Tensors[1].Dims, m)
	}
}
