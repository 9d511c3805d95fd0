package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	ckptpb "github.com/mspipe/mspipe/npu/ckpt/proto"
)

// seqBytes returns n bytes 0, 1, 2, ... (mod 251) so every element differs.
func seqBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

func encode(t *testing.T, tensors []Tensor, opts WriteOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, tensors, opts); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return buf.Bytes()
}

func TestRoundTripEveryDType(t *testing.T) {
	dims := []int64{2, 3}
	for _, dtype := range DTypes() {
		t.Run(dtype, func(t *testing.T) {
			size, _ := DTypeSize(dtype)
			in := []Tensor{
				{Name: "w." + dtype, Dims: dims, DType: dtype, Data: seqBytes(6 * size)},
				{Name: "scalar", Dims: []int64{}, DType: dtype, Data: seqBytes(size)},
				{Name: "empty", Dims: []int64{0}, DType: dtype, Data: []byte{}},
				{Name: "empty2", Dims: []int64{3, 0, 2}, DType: dtype, Data: nil},
			}
			for _, crc := range []bool{false, true} {
				data := encode(t, in, WriteOptions{CRC: crc})
				f, err := DecodeFile("mem.ckpt", data)
				if err != nil {
					t.Fatalf("crc=%v: Decode: %v", crc, err)
				}
				if f.CRC != crc || f.Values != len(in) {
					t.Fatalf("crc=%v: File{CRC: %v, Values: %d}, want CRC %v, %d values", crc, f.CRC, f.Values, crc, len(in))
				}
				if err := Compare(in, f.Tensors); err != nil {
					t.Fatalf("crc=%v: round trip: %v", crc, err)
				}
				for i, got := range f.Tensors {
					if got.Name != in[i].Name || !reflect.DeepEqual(got.Dims, in[i].Dims) || got.DType != dtype || len(got.Data) != len(in[i].Data) {
						t.Fatalf("tensor %d = %s %v %s %d bytes, want %s %v %s %d bytes", i,
							got.Name, got.Dims, got.DType, len(got.Data), in[i].Name, in[i].Dims, dtype, len(in[i].Data))
					}
				}
			}
		})
	}
}

func TestScalarIsStoredAsMindSporeDimsZero(t *testing.T) {
	s, _ := NewFloat32("learning_rate", nil, []float32{0.01})
	var cp ckptpb.Checkpoint
	if err := proto.Unmarshal(encode(t, []Tensor{s}, WriteOptions{}), &cp); err != nil {
		t.Fatal(err)
	}
	if got := cp.GetValue()[0].GetTensor().GetDims(); !reflect.DeepEqual(got, []int64{0}) {
		t.Fatalf("scalar dims on disk = %v, want [0]", got)
	}
}

func TestSlicingFollowsArraySplit(t *testing.T) {
	// 100 Float32 = 400 bytes over a 64-byte limit: ceil(400/64) = 7 pieces;
	// array_split gives 100 = 2×15 + 5×14 elements.
	vals := make([]float32, 100)
	for i := range vals {
		vals[i] = float32(i) - 50.5
	}
	big, err := NewFloat32("fc.weight", []int64{10, 10}, vals)
	if err != nil {
		t.Fatal(err)
	}
	small, _ := NewFloat32("fc.bias", []int64{10}, vals[:10]) // 40 bytes: one value
	data := encode(t, []Tensor{big, small}, WriteOptions{SliceBytes: 64})

	var cp ckptpb.Checkpoint
	if err := proto.Unmarshal(data, &cp); err != nil {
		t.Fatalf("stock protobuf decode: %v", err)
	}
	var gotLens []int
	for i, v := range cp.GetValue() {
		wantTag, wantDims := "fc.weight", []int64{10, 10}
		if i == 7 {
			wantTag, wantDims = "fc.bias", []int64{10}
		}
		if v.GetTag() != wantTag || !reflect.DeepEqual(v.GetTensor().GetDims(), wantDims) || v.GetTensor().GetTensorType() != "Float32" {
			t.Fatalf("value[%d] = %q %v %q, want %q %v Float32", i, v.GetTag(), v.GetTensor().GetDims(), v.GetTensor().GetTensorType(), wantTag, wantDims)
		}
		gotLens = append(gotLens, len(v.GetTensor().GetTensorContent()))
	}
	if want := []int{60, 60, 56, 56, 56, 56, 56, 40}; !reflect.DeepEqual(gotLens, want) {
		t.Fatalf("content lengths = %v, want %v", gotLens, want)
	}

	f, err := DecodeFile("mem.ckpt", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Values != 8 || len(f.Tensors) != 2 {
		t.Fatalf("decoded %d values into %d tensors, want 8 into 2", f.Values, len(f.Tensors))
	}
	got, _ := f.Tensors[0].Float32s()
	if !reflect.DeepEqual(got, vals) || !reflect.DeepEqual(f.Tensors[0].Dims, []int64{10, 10}) {
		t.Fatalf("merged fc.weight = %v %v, want the 100 original values as [10 10]", f.Tensors[0].Dims, got)
	}
}

func TestSlicingAtExactLimitKeepsOneValue(t *testing.T) {
	x := Tensor{Name: "x", Dims: []int64{16}, DType: DTypeFloat32, Data: seqBytes(64)}
	var cp ckptpb.Checkpoint
	if err := proto.Unmarshal(encode(t, []Tensor{x}, WriteOptions{SliceBytes: 64}), &cp); err != nil {
		t.Fatal(err)
	}
	if n := len(cp.GetValue()); n != 1 {
		t.Fatalf("64 bytes at a 64-byte limit wrote %d values, want 1 (MindSpore splits only above the limit)", n)
	}
}

// valueBytes encodes one Checkpoint message with a single Value, by hand.
func valueBytes(tag string, dims []int64, dtype string, content []byte) []byte {
	tp := &ckptpb.TensorProto{Dims: dims, TensorType: proto.String(dtype), TensorContent: content}
	if content == nil {
		tp.TensorContent = []byte{}
	}
	b, err := proto.Marshal(&ckptpb.Checkpoint{Value: []*ckptpb.Checkpoint_Value{{
		Tag: proto.String(tag), Value: &ckptpb.Checkpoint_Value_Tensor{Tensor: tp}}}})
	if err != nil {
		panic(err)
	}
	return b
}

func TestDecodeAcceptsPerSliceDimsAlongAxis0(t *testing.T) {
	// A writer that gives each slice its own dims: [1 4] + [2 4] = [3 4].
	data := append(valueBytes("w", []int64{1, 4}, "Int32", seqBytes(16)), valueBytes("w", []int64{2, 4}, "Int32", seqBytes(32))...)
	got, err := Decode("axis0.ckpt", data)
	if err != nil {
		t.Fatal(err)
	}
	want := append(seqBytes(16), seqBytes(32)...)
	if len(got) != 1 || !reflect.DeepEqual(got[0].Dims, []int64{3, 4}) || !bytes.Equal(got[0].Data, want) {
		t.Fatalf("got %v, want one Int32 [3 4] tensor with both slices' bytes", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	f32 := func(n int) []byte { return seqBytes(4 * n) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"mismatched trailing dims", cat(valueBytes("w", []int64{1, 4}, "Float32", f32(4)), valueBytes("w", []int64{1, 5}, "Float32", f32(5))),
			ErrShape, `tensor "w" (value[1] at byte 38): slice dims [1 5] do not continue value[0] dims [1 4] along axis 0`},
		{"dtype changes between slices", cat(valueBytes("w", []int64{4}, "Float32", f32(2)), valueBytes("w", []int64{4}, "Int32", f32(2))),
			ErrShape, `slice has dtype Int32, value[0] has Float32`},
		{"slices too short", cat(valueBytes("w", []int64{4}, "Float32", f32(2)), valueBytes("w", []int64{4}, "Float32", f32(1))),
			ErrShape, `2 slices hold 12 bytes, want 16 for Float32 [4]`},
		{"duplicate tag", cat(valueBytes("a", []int64{1}, "Float32", f32(1)), valueBytes("b", []int64{1}, "Float32", f32(1)), valueBytes("a", []int64{1}, "Float32", f32(1))),
			ErrName, `tensor "a" (value[2] at byte 48): tag already used by value[0]`},
		{"empty tag", valueBytes("", []int64{1}, "Float32", f32(1)), ErrName, `value[0] at byte 0: empty name`},
		{"bad utf8 tag", valueBytes("w\xff", []int64{1}, "Float32", f32(1)), ErrName, `not valid UTF-8`},
		{"scalar marker with two elements", valueBytes("s", []int64{0}, "Float32", f32(2)), ErrShape, `data is 8 bytes, want 0 for Float32 [0]`},
		{"map tensor", []byte{0x0a, 0x05, 0x0a, 0x01, 'm', 0x1a, 0x00}, ErrUnsupported, `map tensor (MapParameter) values are not supported`},
		{"unknown top-level field", []byte{0x10, 0x01}, ErrFormat, `byte 0: unexpected field 2 (wire type 0) in Checkpoint`},
		{"missing tensor", []byte{0x0a, 0x03, 0x0a, 0x01, 'm'}, ErrFormat, `tensor "m" (value[0] at byte 0): missing tensor`},
		{"crc trailer out of range", cat(valueBytes("w", []int64{1}, "Float32", f32(1)), []byte("crc_num\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00")),
			ErrCRC, `does not fit 32 bits`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("bad.ckpt", tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "bad.ckpt" {
				t.Fatalf("err = %#v, want *Error naming bad.ckpt", err)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "bad.ckpt: ") {
				t.Fatalf("err = %q, want it to start with the file and contain %q", err, tc.msg)
			}
		})
	}
}

func TestCRCTrailerFormat(t *testing.T) {
	x, _ := NewFloat32("x", []int64{2}, []float32{1, 2})
	plain := encode(t, []Tensor{x}, WriteOptions{})
	withCRC := encode(t, []Tensor{x}, WriteOptions{CRC: true})
	if !bytes.Equal(withCRC[:len(plain)], plain) || len(withCRC) != len(plain)+17 {
		t.Fatalf("CRC file is not the plain file plus a 17-byte trailer")
	}
	trailer := withCRC[len(plain):]
	var want [17]byte
	copy(want[:], "crc_num")
	binary.BigEndian.PutUint32(want[13:], crc32.ChecksumIEEE(plain))
	if !bytes.Equal(trailer, want[:]) {
		t.Fatalf("trailer = %x, want %x", trailer, want)
	}
	// Flip one content byte: the trailer catches what protobuf cannot.
	bad := bytes.Clone(withCRC)
	bad[len(plain)-1] ^= 0x40
	if _, err := Decode("flip.ckpt", bad); !errors.Is(err, ErrCRC) {
		t.Fatalf("flipped content with CRC: err = %v, want ErrCRC", err)
	}
	if _, err := Decode("flip.ckpt", bad[:len(plain)]); err != nil {
		t.Fatalf("the same flip without CRC is undetectable and must decode: %v", err)
	}
}

func TestFloatAccessors(t *testing.T) {
	le16 := func(vs ...uint16) []byte {
		b := make([]byte, 2*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint16(b[2*i:], v)
		}
		return b
	}
	f64 := make([]byte, 16)
	binary.LittleEndian.PutUint64(f64, math.Float64bits(0.1))
	binary.LittleEndian.PutUint64(f64[8:], math.Float64bits(-3))
	tests := []struct {
		t    Tensor
		want []float32
	}{
		{Tensor{Name: "h", Dims: []int64{6}, DType: DTypeFloat16, Data: le16(0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00, 0x8000)},
			[]float32{1, -2, 1.0 / (1 << 24), 65504, float32(math.Inf(1)), float32(math.Copysign(0, -1))}},
		{Tensor{Name: "b", Dims: []int64{3}, DType: DTypeBFloat16, Data: le16(0x3f80, 0xc040, 0x4049)},
			[]float32{1, -3, 3.140625}},
		{Tensor{Name: "d", Dims: []int64{2}, DType: DTypeFloat64, Data: f64}, []float32{0.1, -3}},
	}
	for _, tc := range tests {
		got, err := tc.t.Float32s()
		if err != nil {
			t.Fatalf("%s: %v", tc.t.DType, err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(tc.want[i]) {
				t.Fatalf("%s: element %d = %v, want %v", tc.t.DType, i, got[i], tc.want[i])
			}
		}
	}
	nan := Tensor{Name: "n", Dims: []int64{1}, DType: DTypeFloat16, Data: le16(0x7e00)}
	if v, _ := nan.Float32s(); !math.IsNaN(float64(v[0])) {
		t.Fatalf("half 0x7e00 = %v, want NaN", v[0])
	}
	d, _ := tests[2].t.Float64s()
	if d[0] != 0.1 {
		t.Fatalf("Float64s kept %v, want exactly 0.1", d[0])
	}
	i32 := Tensor{Name: "i", Dims: []int64{1}, DType: DTypeInt32, Data: make([]byte, 4)}
	if _, err := i32.Float32s(); !errors.Is(err, ErrNotFloat) {
		t.Fatalf("Int32.Float32s err = %v, want ErrNotFloat", err)
	}
}

func TestNewFloat32ChecksCount(t *testing.T) {
	if _, err := NewFloat32("w", []int64{2, 2}, []float32{1, 2, 3}); !errors.Is(err, ErrShape) {
		t.Fatalf("3 values for [2 2]: err = %v, want ErrShape", err)
	}
	if _, err := NewFloat32("w", []int64{-1}, nil); !errors.Is(err, ErrShape) {
		t.Fatalf("negative dim: err = %v, want ErrShape", err)
	}
}

func TestHashAndCompare(t *testing.T) {
	a, _ := NewFloat32("a", []int64{2, 2}, []float32{1, 2, 3, 4})
	reshaped := a
	reshaped.Dims = []int64{4}
	renamed := a
	renamed.Name = "other"
	if a.Hash() == reshaped.Hash() {
		t.Fatal("hash ignores the shape")
	}
	if a.Hash() != renamed.Hash() {
		t.Fatal("hash depends on the name")
	}
	// Known answer, computed independently as sha256("Float32\x00" + uint64le(2)
	// + uint64le(2) + uint64le(2) + float32le(1, 2, 3, 4)): pins the definition
	// that hashes stored by later tools depend on.
	if got, want := a.Hash(), "5a49f39379ee125ab85ef68275bef84db066f6ade347ba2ccb836806a3681ced"; got != want {
		t.Fatalf("hash = %s, want %s", got, want)
	}
	b, _ := NewFloat32("b", []int64{1}, []float32{5})
	changed, _ := NewFloat32("a", []int64{2, 2}, []float32{1, 2, 3, 5})
	err := Compare([]Tensor{a, b}, []Tensor{changed, renamed})
	if err == nil {
		t.Fatal("Compare found no difference")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{`tensor "a": content differs`, `tensor "b": missing`, `tensor "other": unexpected`}
	if len(lines) != len(want) {
		t.Fatalf("Compare = %q, want %d lines", err, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Fatalf("line %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
	if err := Compare([]Tensor{a, b}, []Tensor{b, a}); err != nil {
		t.Fatalf("same tensors in another order: %v", err)
	}
}

func TestWriteIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "CKP-1_1.ckpt")
	good, _ := NewFloat32("w", []int64{2}, []float32{1, 2})
	if err := Write(path, []Tensor{good}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)

	// The bad tensor comes after a good one, so encoding has already written
	// bytes to the temporary file when it fails.
	bad := Tensor{Name: "bad", Dims: []int64{3}, DType: DTypeFloat32, Data: make([]byte, 8)}
	big := Tensor{Name: "big", Dims: []int64{1024}, DType: DTypeFloat32, Data: make([]byte, 4096)}
	err := Write(path, []Tensor{big, bad}, WriteOptions{})
	if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrShape naming %s", err, path)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("failed write changed the existing checkpoint")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries after a failed write, want only the old checkpoint", len(entries))
	}
	fresh := filepath.Join(dir, "CKP-1_2.ckpt")
	if err := Write(fresh, []Tensor{big, bad}, WriteOptions{}); err == nil {
		t.Fatal("write of an invalid tensor succeeded")
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed write left %s: %v", fresh, err)
	}
	if err := Write(path, []Tensor{good, good}, WriteOptions{}); !errors.Is(err, ErrName) {
		t.Fatalf("duplicate name: err = %v, want ErrName", err)
	}
}

func TestReadMissingFile(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "nope.ckpt"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want ErrNotExist", err)
	}
}
