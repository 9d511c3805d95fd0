package ckpt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	ckptpb "github.com/mspipe/mspipe/npu/ckpt/proto"
)

func FuzzDecode(f *testing.F) {
	w, _ := NewFloat32("conv1.weight", []int64{2, 3, 2}, []float32{1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12})
	m, _ := NewFloat32("moments.conv1.weight", []int64{2, 3, 2}, make([]float32, 12))
	lr, _ := NewFloat32("learning_rate", nil, []float32{0.01})
	step := Tensor{Name: "global_step", Dims: []int64{1}, DType: DTypeInt64, Data: []byte{9, 0, 0, 0, 0, 0, 0, 0}}
	half := Tensor{Name: "h", Dims: []int64{2}, DType: DTypeFloat16, Data: []byte{0, 0x3c, 0, 0xc0}}
	all := []Tensor{w, m, lr, step, half}
	for _, opts := range []WriteOptions{{}, {CRC: true}, {SliceBytes: 16}, {SliceBytes: 10, CRC: true}} {
		var buf bytes.Buffer
		if err := Encode(&buf, all, opts); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add(append(valueBytes("w", []int64{1, 2}, "Int8", []byte{1, 2}), valueBytes("w", []int64{2, 2}, "Int8", []byte{3, 4, 5, 6})...))
	bad, _ := filepath.Glob("testdata/bad/*.ckpt")
	for _, p := range bad {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := DecodeFile("fuzz.ckpt", data)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "fuzz.ckpt" {
				t.Fatalf("error %v is not an *Error naming the file", err)
			}
			return
		}
		// Whatever mspipe accepts, stock protobuf accepts too.
		payload := data
		if file.CRC {
			payload = data[:len(data)-crcTrailerLen]
		}
		var cp ckptpb.Checkpoint
		if err := proto.Unmarshal(payload, &cp); err != nil {
			t.Fatalf("mspipe accepted what protobuf rejects: %v", err)
		}
		if len(cp.GetValue()) != file.Values {
			t.Fatalf("protobuf sees %d values, mspipe %d", len(cp.GetValue()), file.Values)
		}
		for _, tensor := range file.Tensors {
			if err := tensor.Validate(); err != nil {
				t.Fatalf("accepted an invalid tensor: %v", err)
			}
		}
		// Round trip: what was accepted re-encodes to the same content.
		var buf bytes.Buffer
		if err := Encode(&buf, file.Tensors, WriteOptions{SliceBytes: 32}); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := Decode("again.ckpt", buf.Bytes())
		if err != nil {
			t.Fatalf("decode of re-encoded file: %v", err)
		}
		if err := Compare(file.Tensors, again); err != nil {
			t.Fatalf("round trip changed content: %v", err)
		}
	})
}
