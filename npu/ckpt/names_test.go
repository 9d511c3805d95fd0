package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// A tensor name over MaxNameBytes is refused by every reader, before it is
// copied: a 200 MB name took 80 s and 1 GB. Writers refuse it too.
func TestLongNamesAreRefused(t *testing.T) {
	long := strings.Repeat("n", 8<<20)
	data := valueBytes(long, []int64{1}, "Float32", make([]byte, 4))
	if _, err := Decode("long.ckpt", data); !errors.Is(err, ErrName) || !strings.Contains(err.Error(), "name of 8388608 bytes is over the 4096-byte limit") {
		t.Errorf("Decode: %v", err)
	}
	if _, err := IndexReader("long.ckpt", bytes.NewReader(data), int64(len(data))); !errors.Is(err, ErrName) || !strings.Contains(err.Error(), "over the 4096-byte limit") {
		t.Errorf("IndexReader: %v", err)
	}
	var buf bytes.Buffer
	if err := Encode(&buf, []Tensor{{Name: long[:MaxNameBytes+1], DType: DTypeFloat32, Dims: []int64{1}, Data: make([]byte, 4)}}, WriteOptions{}); !errors.Is(err, ErrName) {
		t.Errorf("Encode: %v", err)
	}
	// The limit itself is accepted.
	ok := valueBytes(long[:MaxNameBytes], []int64{1}, "Float32", make([]byte, 4))
	if _, err := Decode("ok.ckpt", ok); err != nil {
		t.Errorf("a name of exactly %d bytes: %v", MaxNameBytes, err)
	}
}

// safetensorsWithHeader wraps a raw JSON header as a safetensors file.
func safetensorsWithHeader(header string, data int) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(out, header...), make([]byte, data)...)
}

// Names that are not UTF-8 are refused with their offset: before, JSON
// decoding turned them into U+FFFD and the tensor silently got another
// name.
func TestSafetensorsNonUTF8NamesAreRefused(t *testing.T) {
	header := "{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"
	_, err := DecodeSafetensors("bad.safetensors", safetensorsWithHeader(header, 4))
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "byte 11: safetensors header: not valid UTF-8 at header byte 3") {
		t.Fatalf("err = %v, want the offset of the bad byte", err)
	}
	good := `{"w\u00e9":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
	f, err := DecodeSafetensors("good.safetensors", safetensorsWithHeader(good, 4))
	if err != nil || f.Tensors[0].Name != "w\u00e9" {
		t.Fatalf("valid UTF-8 name: %v, %v", f, err)
	}
}
