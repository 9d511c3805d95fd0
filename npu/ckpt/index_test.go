package ckpt

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// countingReader records how many bytes were read through it.
type countingReader struct {
	r     io.ReaderAt
	bytes int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.bytes += int64(n)
	return n, err
}

// checkIndexMatchesDecode indexes data and checks that every tensor read
// back through the index equals what Decode returns.
func checkIndexMatchesDecode(t *testing.T, name string, data []byte) *Index {
	t.Helper()
	want, err := DecodeFile(name, data)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	x, err := IndexReader(name, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("IndexReader: %v", err)
	}
	if x.CRC != want.CRC || x.Size != int64(len(data)) || len(x.Tensors) != len(want.Tensors) {
		t.Fatalf("index crc=%v size=%d tensors=%d, want crc=%v size=%d tensors=%d", x.CRC, x.Size, len(x.Tensors), want.CRC, len(data), len(want.Tensors))
	}
	for i, w := range want.Tensors {
		got := x.Tensors[i]
		if got.Name != w.Name || got.DType != w.DType || !reflect.DeepEqual(got.Dims, w.Dims) || got.Bytes != int64(len(w.Data)) {
			t.Fatalf("tensor %d = %s %s %v %d bytes, want %s %s %v %d bytes", i, got.Name, got.DType, got.Dims, got.Bytes, w.Name, w.DType, w.Dims, len(w.Data))
		}
		buf := make([]byte, got.Bytes)
		if err := got.ReadAt(bytes.NewReader(data), buf, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, w.Data) {
			t.Fatalf("tensor %s: data read through the index differs from Decode's", w.Name)
		}
	}
	return x
}

func TestIndexMatchesDecode(t *testing.T) {
	var tensors []Tensor
	for i, dtype := range DTypes() {
		size, _ := DTypeSize(dtype)
		dims := []int64{int64(i%3 + 1), 5}
		tensors = append(tensors, Tensor{Name: "p." + dtype, Dims: dims, DType: dtype, Data: seqBytes(size * int(dims[0]*dims[1]))})
	}
	lr, _ := NewFloat32("learning_rate", nil, []float32{0.01})
	empty := Tensor{Name: "empty", Dims: []int64{0, 4}, DType: DTypeFloat32}
	tensors = append(tensors, lr, empty)
	for _, opts := range []WriteOptions{{}, {CRC: true}, {SliceBytes: 16}, {SliceBytes: 7 * 4, CRC: true}} {
		x := checkIndexMatchesDecode(t, "set.ckpt", encode(t, tensors, opts))
		if opts.SliceBytes > 0 {
			sliced := 0
			for _, tensor := range x.Tensors {
				if len(tensor.Pieces) > 1 {
					sliced++
				}
			}
			if sliced == 0 {
				t.Fatalf("slice limit %d: no tensor indexed in several pieces", opts.SliceBytes)
			}
		}
	}
	// Slices that carry their own dims along axis 0.
	axis0 := append(valueBytes("w", []int64{1, 4}, "Int32", seqBytes(16)), valueBytes("w", []int64{2, 4}, "Int32", seqBytes(32))...)
	checkIndexMatchesDecode(t, "axis0.ckpt", axis0)
}

func TestIndexReadsOnlyFraming(t *testing.T) {
	big := Tensor{Name: "big", Dims: []int64{1024, 1024}, DType: DTypeFloat32, Data: make([]byte, 4<<20)}
	small, _ := NewFloat32("small", []int64{2}, []float32{1, 2})
	data := encode(t, []Tensor{big, small}, WriteOptions{SliceBytes: 1 << 20, CRC: true})
	r := &countingReader{r: bytes.NewReader(data)}
	x, err := IndexReader("big.ckpt", r, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Tensors) != 2 || len(x.Tensors[0].Pieces) != 4 {
		t.Fatalf("index = %+v, want big in 4 pieces and small", x.Tensors)
	}
	if r.bytes > 64<<10 {
		t.Fatalf("indexing a %d-byte file read %d bytes, want only the framing", len(data), r.bytes)
	}
	// A read across a piece boundary gets the right bytes.
	for i := range big.Data {
		big.Data[i] = byte(i * 7)
	}
	data = encode(t, []Tensor{big}, WriteOptions{SliceBytes: 1 << 20})
	x, err = IndexReader("big.ckpt", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 100)
	if err := x.Tensors[0].ReadAt(bytes.NewReader(data), got, 1<<20-50); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big.Data[1<<20-50:1<<20+50]) {
		t.Fatal("read across a piece boundary returned wrong bytes")
	}
	if err := x.Tensors[0].ReadAt(bytes.NewReader(data), got, int64(len(big.Data))-10); err == nil {
		t.Fatal("read past the tensor's end succeeded")
	}
}

// TestIndexBadCorpus: every file of the bad corpus fails IndexReader or
// CheckCRC with an *Error naming the file, as Read fails on it.
func TestIndexBadCorpus(t *testing.T) {
	corpus := badCorpus(t)
	names := make([]string, 0, len(corpus))
	for name := range corpus {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		data := corpus[name]
		file := filepath.Join("bad", name+".ckpt")
		r := bytes.NewReader(data)
		x, err := IndexReader(file, r, int64(len(data)))
		if err == nil {
			err = CheckCRC(file, r, int64(len(data)))
		}
		if err == nil {
			t.Fatalf("%s: indexed without error: %+v", name, x)
		}
		var ce *Error
		if !errors.As(err, &ce) || ce.File != file || !strings.HasPrefix(err.Error(), file+": ") {
			t.Fatalf("%s: err = %v, want an *Error naming %s", name, err, file)
		}
		_, readErr := Decode(file, data)
		for _, sentinel := range []error{ErrFormat, ErrCRC, ErrDType, ErrShape, ErrName, ErrUnsupported, ErrEmpty} {
			if errors.Is(readErr, sentinel) != errors.Is(err, sentinel) {
				t.Fatalf("%s: index error %q and decode error %q disagree about %v", name, err, readErr, sentinel)
			}
		}
		if ce.Tensor != "" && !strings.Contains(readErr.Error(), ce.Tensor) {
			t.Fatalf("%s: index blames tensor %q, decode says %v", name, ce.Tensor, readErr)
		}
	}
}

func TestIndexTruncatedNamesTheTensor(t *testing.T) {
	w := Tensor{Name: "fc.weight", Dims: []int64{64, 64}, DType: DTypeFloat32, Data: seqBytes(4 * 64 * 64)}
	data := encode(t, []Tensor{w}, WriteOptions{CRC: true})
	cut := data[:len(data)/2]
	_, err := IndexReader("cut.ckpt", bytes.NewReader(cut), int64(len(cut)))
	if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `tensor "fc.weight"`) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("err = %v, want a truncation error naming fc.weight", err)
	}
}

// FuzzIndexReader: on any bytes, indexing never panics and agrees with
// Decode: IndexReader plus CheckCRC fail exactly when Decode fails, and
// the indexed tensors read back what Decode returns.
func FuzzIndexReader(f *testing.F) {
	w, _ := NewFloat32("conv1.weight", []int64{2, 3, 2}, []float32{1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12})
	lr, _ := NewFloat32("learning_rate", nil, []float32{0.01})
	for _, opts := range []WriteOptions{{}, {CRC: true}, {SliceBytes: 16, CRC: true}} {
		var buf bytes.Buffer
		if err := Encode(&buf, []Tensor{w, lr}, opts); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add(append(valueBytes("w", []int64{1, 2}, "Int8", []byte{1, 2}), valueBytes("w", []int64{2, 2}, "Int8", []byte{3, 4, 5, 6})...))
	bad, _ := filepath.Glob(filepath.Join(badDir, "*.ckpt"))
	for _, p := range bad {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, decodeErr := DecodeFile("fuzz.ckpt", data)
		r := bytes.NewReader(data)
		x, err := IndexReader("fuzz.ckpt", r, int64(len(data)))
		if err == nil {
			err = CheckCRC("fuzz.ckpt", r, int64(len(data)))
		}
		if (err == nil) != (decodeErr == nil) {
			t.Fatalf("index error %v, decode error %v", err, decodeErr)
		}
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("index error %v is not an *Error", err)
			}
			return
		}
		if len(x.Tensors) != len(want.Tensors) {
			t.Fatalf("index has %d tensors, decode %d", len(x.Tensors), len(want.Tensors))
		}
		for i, d := range want.Tensors {
			got := make([]byte, x.Tensors[i].Bytes)
			if err := x.Tensors[i].ReadAt(r, got, 0); err != nil || !bytes.Equal(got, d.Data) || !reflect.DeepEqual(x.Tensors[i].Dims, d.Dims) {
				t.Fatalf("tensor %d: index %v %v, decode %v (%v)", i, x.Tensors[i].Dims, got, d.Dims, err)
			}
		}
	})
}
