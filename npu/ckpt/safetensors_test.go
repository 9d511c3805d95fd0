package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// safetensorsFixture holds every dtype safetensors and MindSpore share, a
// scalar, an empty tensor and widths that would misalign a naive layout.
func safetensorsFixture(t *testing.T) []Tensor {
	t.Helper()
	w, err := NewFloat32("fc.weight", []int64{2, 3}, []float32{1, -2, 3.5, -4, 5, 0.25})
	if err != nil {
		t.Fatal(err)
	}
	lr, _ := NewFloat32("learning_rate", nil, []float32{0.01})
	seq := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		return b
	}
	return []Tensor{
		{Name: "flag", Dims: []int64{3}, DType: DTypeBool, Data: []byte{1, 0, 1}},
		w,
		{Name: "h", Dims: []int64{2}, DType: DTypeFloat16, Data: []byte{0x00, 0x3c, 0x00, 0xc0}},
		{Name: "global_step", Dims: []int64{1}, DType: DTypeInt64, Data: seq(8)},
		lr,
		{Name: "i8", Dims: []int64{1, 5}, DType: DTypeInt8, Data: seq(5)},
		{Name: "i16", Dims: []int64{3}, DType: DTypeInt16, Data: seq(6)},
		{Name: "i32", Dims: []int64{2}, DType: DTypeInt32, Data: seq(8)},
		{Name: "u8", Dims: []int64{1}, DType: DTypeUInt8, Data: seq(1)},
		{Name: "u16", Dims: []int64{1}, DType: DTypeUInt16, Data: seq(2)},
		{Name: "u32", Dims: []int64{1}, DType: DTypeUInt32, Data: seq(4)},
		{Name: "u64", Dims: []int64{1}, DType: DTypeUInt64, Data: seq(8)},
		{Name: "bf", Dims: []int64{2}, DType: DTypeBFloat16, Data: seq(4)},
		{Name: "d", Dims: []int64{2, 1}, DType: DTypeFloat64, Data: seq(16)},
		{Name: "empty", Dims: []int64{0, 4}, DType: DTypeFloat32, Data: []byte{}},
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	tensors := safetensorsFixture(t)
	path := filepath.Join(t.TempDir(), "model.safetensors")
	meta := map[string]string{"format": "ms", "epoch": "2"}
	if err := WriteSafetensors(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Compare(tensors, f.Tensors); err != nil {
		t.Fatal(err)
	}
	for i, got := range f.Tensors {
		if got.Name != tensors[i].Name {
			t.Fatalf("tensor %d is %q, want %q: the header order is the order read", i, got.Name, tensors[i].Name)
		}
	}
	if !reflect.DeepEqual(f.Metadata, meta) {
		t.Fatalf("metadata %v, want %v", f.Metadata, meta)
	}
	if f.Tensors[4].Dims != nil {
		t.Fatalf("scalar read back with dims %v, want none", f.Tensors[4].Dims)
	}

	// Layout: the data section starts 8-byte aligned and every tensor at a
	// multiple of its element size.
	raw, _ := os.ReadFile(path)
	n := binary.LittleEndian.Uint64(raw)
	if (8+n)%8 != 0 {
		t.Fatalf("data starts at byte %d, not 8-byte aligned", 8+n)
	}
	header := string(raw[8 : 8+n])
	if !strings.HasPrefix(header, `{"__metadata__":{"epoch":"2","format":"ms"},"flag":{"dtype":"BOOL","shape":[3],"data_offsets":[`) {
		t.Fatalf("header starts %q", header[:min(len(header), 120)])
	}
	if !strings.Contains(header, `"learning_rate":{"dtype":"F32","shape":[],"data_offsets":[`) {
		t.Fatalf("scalar entry not written with shape []: %s", header)
	}
	// Widest first: the two 8-byte tensors come first, in the given order.
	if !strings.Contains(header, `"global_step":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}`) ||
		!strings.Contains(header, `"u64":{"dtype":"U64","shape":[1],"data_offsets":[8,16]}`) {
		t.Fatalf("8-byte tensors not laid out first: %s", header)
	}

	// A file without metadata reads back with none.
	var buf bytes.Buffer
	if err := EncodeSafetensors(&buf, tensors[:2], nil); err != nil {
		t.Fatal(err)
	}
	g, err := DecodeSafetensors("x", buf.Bytes())
	if err != nil || g.Metadata != nil || len(g.Tensors) != 2 {
		t.Fatalf("no metadata: %+v, %v", g, err)
	}
}

// TestSafetensorsAlignment checks every tensor starts at a multiple of its
// element size within the data section.
func TestSafetensorsAlignment(t *testing.T) {
	tensors := safetensorsFixture(t)
	var buf bytes.Buffer
	if err := EncodeSafetensors(&buf, tensors, nil); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	n := binary.LittleEndian.Uint64(raw)
	_, entries, _, err := parseSafetensorsHeader(raw[8 : 8+n])
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range entries {
		size, _ := DTypeSize(safetensorsDTypes[*e.DType])
		if e.DataOffsets[0]%int64(size) != 0 {
			t.Errorf("%s (%s) starts at %d, not a multiple of %d", name, *e.DType, e.DataOffsets[0], size)
		}
	}
}

// TestSafetensorsHandMade decodes bytes written by hand after the format's
// description, the way another implementation lays them out: keys in a
// different order from the data, header padded with spaces.
func TestSafetensorsHandMade(t *testing.T) {
	header := `{"b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	for (8+len(header))%8 != 0 {
		header += " "
	}
	var raw []byte
	raw = binary.LittleEndian.AppendUint64(raw, uint64(len(header)))
	raw = append(raw, header...)
	raw = append(raw, 0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0)    // 1.0, -2.0
	raw = append(raw, 7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff) // 7, -1
	f, err := DecodeSafetensors("hand.safetensors", raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 2 || f.Tensors[0].Name != "b" || f.Tensors[1].Name != "a" {
		t.Fatalf("tensors %+v", f.Tensors)
	}
	vals, _ := f.Tensors[1].Float32s()
	if !reflect.DeepEqual(vals, []float32{1, -2}) || f.Tensors[1].DType != DTypeFloat32 {
		t.Fatalf("a = %v %s", vals, f.Tensors[1].DType)
	}
	if f.Tensors[0].DType != DTypeInt32 || int32(binary.LittleEndian.Uint32(f.Tensors[0].Data[4:])) != -1 {
		t.Fatalf("b = %v %s", f.Tensors[0].Data, f.Tensors[0].DType)
	}
}

func TestSafetensorsBadInput(t *testing.T) {
	build := func(header string, data int) []byte {
		raw := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		raw = append(raw, header...)
		return append(raw, make([]byte, data)...)
	}
	entry := func(name, dtype, shape string, b, e int) string {
		return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":[` + strconv.Itoa(b) + `,` + strconv.Itoa(e) + `]}`
	}
	huge := binary.LittleEndian.AppendUint64(nil, 1<<40)
	cases := []struct {
		name   string
		data   []byte
		tensor string // the tensor the error names, "" for none
		want   string
		is     error
	}{
		{"short", []byte{1, 2, 3}, "", "too short for the 8-byte header length", ErrFormat},
		{"huge header", append(huge, "{}"...), "", "header length 1099511627776 is over the 100000000-byte limit", ErrFormat},
		{"truncated header", build(`{"a":{}}`, 0)[:12], "", "header length 8 runs past the end (4 bytes left; file truncated?)", ErrFormat},
		{"not json", build(`[1, 2]`, 0), "", "not a JSON object", ErrFormat},
		{"broken json", build(`{"a":{"dtype":"F32",`, 0), "a", "unexpected EOF", ErrFormat},
		{"no tensors", build(`{"__metadata__":{"k":"v"}}`, 0), "", "no tensors", ErrEmpty},
		{"metadata not strings", build(`{"__metadata__":{"k":1},`+entry("a", "F32", "[1]", 0, 4)+`}`, 4), "", "__metadata__: want an object of strings", ErrFormat},
		{"missing dtype", build(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4), "a", "missing dtype", ErrFormat},
		{"missing offsets", build(`{"a":{"dtype":"F32","shape":[1]}}`, 4), "a", "missing data_offsets", ErrFormat},
		{"unknown dtype", build(`{`+entry("a", "F8_E4M3", "[4]", 0, 4)+`}`, 4), "a", `safetensors dtype "F8_E4M3"`, ErrDType},
		{"negative dim", build(`{`+entry("a", "F32", "[-1]", 0, 4)+`}`, 4), "a", "negative dim", ErrShape},
		{"size mismatch", build(`{`+entry("a", "F32", "[2]", 0, 4)+`}`, 4), "a", "data_offsets [0, 4] hold 4 bytes, shape [2] of F32 needs 8", ErrShape},
		{"past the end", build(`{`+entry("a", "F32", "[2]", 0, 8)+`}`, 4), "a", "data_offsets [0, 8] outside the 4 data bytes (file truncated?)", ErrFormat},
		{"overlap", build(`{`+entry("a", "F32", "[2]", 0, 8)+`,`+entry("b", "F32", "[1]", 4, 8)+`}`, 8), "b", "overlap the previous tensor's", ErrFormat},
		{"gap", build(`{`+entry("a", "F32", "[1]", 0, 4)+`,`+entry("b", "F32", "[1]", 8, 12)+`}`, 12), "b", "leave a gap of 4 bytes", ErrFormat},
		{"trailing bytes", build(`{`+entry("a", "F32", "[1]", 0, 4)+`}`, 6), "", "2 bytes after the last tensor's data", ErrFormat},
		{"duplicate", build(`{`+entry("a", "F32", "[1]", 0, 4)+`,`+entry("a", "F32", "[1]", 4, 8)+`}`, 8), "a", "given twice", ErrName},
		{"text after header", build(`{`+entry("a", "F32", "[1]", 0, 4)+`} x`, 4), "", "data after the header object", ErrFormat},
	}
	for _, tc := range cases {
		_, err := DecodeSafetensors("bad.safetensors", tc.data)
		var ce *Error
		if !errors.As(err, &ce) || ce.File != "bad.safetensors" || ce.Tensor != tc.tensor {
			t.Errorf("%s: error %v is not an *Error naming the file and tensor %q", tc.name, err, tc.tensor)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.is) {
			t.Errorf("%s: error %q, want it to contain %q and wrap %v", tc.name, err, tc.want, tc.is)
		}
	}

	// Writing refuses what cannot be represented, and leaves no file.
	dir := t.TempDir()
	path := filepath.Join(dir, "w.safetensors")
	bad := []struct {
		tensors []Tensor
		want    string
	}{
		{nil, "no tensors"},
		{[]Tensor{{Name: metadataKey, Dims: []int64{1}, DType: DTypeInt8, Data: []byte{1}}}, "reserved for metadata"},
		{[]Tensor{{Name: "a", Dims: []int64{2}, DType: DTypeInt8, Data: []byte{1}}}, "data is 1 bytes, want 2"},
		{[]Tensor{{Name: "a", Dims: []int64{1}, DType: DTypeInt8, Data: []byte{1}}, {Name: "a", Dims: []int64{1}, DType: DTypeInt8, Data: []byte{1}}}, "given twice"},
	}
	for _, tc := range bad {
		err := WriteSafetensors(path, tc.tensors, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("write %v: error %v, want %q", tc.tensors, err, tc.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("a failed write left %d files", len(entries))
		}
	}
}

func TestReadAnyChoosesByExtension(t *testing.T) {
	tensors := safetensorsFixture(t)[:3]
	dir := t.TempDir()
	st, ck := filepath.Join(dir, "m.SafeTensors"), filepath.Join(dir, "m.ckpt")
	if err := WriteSafetensors(st, tensors, nil); err != nil {
		t.Fatal(err)
	}
	if err := Write(ck, tensors, WriteOptions{CRC: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{st, ck} {
		got, err := ReadAny(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := Compare(tensors, got); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	// A .ckpt name on safetensors bytes is read as .ckpt and refused.
	wrong := filepath.Join(dir, "wrong.ckpt")
	raw, _ := os.ReadFile(st)
	os.WriteFile(wrong, raw, 0o644)
	if _, err := ReadAny(wrong); !errors.Is(err, ErrFormat) {
		t.Fatalf("safetensors bytes named .ckpt: %v, want ErrFormat", err)
	}
}

func FuzzDecodeSafetensors(f *testing.F) {
	w, _ := NewFloat32("w", []int64{2, 2}, []float32{1, 2, 3, 4})
	for _, tensors := range [][]Tensor{
		{w},
		{w, {Name: "s", Dims: []int64{1}, DType: DTypeInt16, Data: []byte{1, 2}}, {Name: "e", Dims: []int64{0}, DType: DTypeUInt8, Data: []byte{}}},
	} {
		var buf bytes.Buffer
		if err := EncodeSafetensors(&buf, tensors, map[string]string{"k": "v"}); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := DecodeSafetensors("fuzz.safetensors", data)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "fuzz.safetensors" {
				t.Fatalf("error %v is not an *Error naming the file", err)
			}
			return
		}
		for _, tensor := range file.Tensors {
			if err := tensor.Validate(); err != nil {
				t.Fatalf("accepted an invalid tensor: %v", err)
			}
		}
		var buf bytes.Buffer
		if err := EncodeSafetensors(&buf, file.Tensors, file.Metadata); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeSafetensors("again", buf.Bytes())
		if err != nil {
			t.Fatalf("decode of re-encoded file: %v", err)
		}
		if err := Compare(file.Tensors, again.Tensors); err != nil || !reflect.DeepEqual(file.Metadata, again.Metadata) {
			t.Fatalf("round trip changed content: %v", err)
		}
	})
}
