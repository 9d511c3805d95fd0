package ckpt

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/golden"
)

const badDir = "testdata/bad"

// badCorpus builds the hand-made bad checkpoints kept in testdata/bad. Each
// is derived from a valid file so that exactly one thing is wrong.
func badCorpus(t *testing.T) map[string][]byte {
	t.Helper()
	w, _ := NewFloat32("fc.weight", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	b, _ := NewFloat32("fc.bias", []int64{2}, []float32{0.5, -0.5})
	valid := encode(t, []Tensor{w, b}, WriteOptions{})
	withCRC := encode(t, []Tensor{w, b}, WriteOptions{CRC: true})

	flippedCRC := bytes.Clone(withCRC)
	flippedCRC[30] ^= 0x01 // inside fc.weight's tensor_content
	flippedLen := bytes.Clone(valid)
	flippedLen[1] ^= 0x40 // the first Value's length: now runs past the end

	garbage := make([]byte, 256)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	return map[string][]byte{
		"empty":          {},
		"truncated":      valid[:len(valid)/2],
		"flipped_crc":    flippedCRC,
		"flipped_length": flippedLen,
		"wrong_length":   valueBytes("fc.weight", []int64{2, 3}, "Float32", make([]byte, 20)),
		"unknown_dtype":  valueBytes("fc.weight", []int64{2, 3}, "Float33", make([]byte, 24)),
		"string_dtype":   valueBytes("note", []int64{0}, "str", []byte("h\x00\x00\x00i\x00\x00\x00")),
		"negative_dim":   valueBytes("fc.weight", []int64{-2, 3}, "Float32", make([]byte, 24)),
		"dims_overflow":  valueBytes("fc.weight", []int64{1 << 40, 1 << 40}, "Float32", make([]byte, 4)),
		"bytes_overflow": valueBytes("fc.weight", []int64{1 << 31, 1 << 31}, "Float64", make([]byte, 8)),
		"no_content":     {0x0a, 0x10, 0x0a, 0x01, 'w', 0x12, 0x0b, 0x08, 0x01, 0x12, 0x07, 'F', 'l', 'o', 'a', 't', '3', '2'},
		"garbage":        garbage,
	}
}

func TestBadCorpus(t *testing.T) {
	if golden.Update() {
		if err := os.MkdirAll(badDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range badCorpus(t) {
			if err := os.WriteFile(filepath.Join(badDir, name+".ckpt"), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	inputs, _ := filepath.Glob(filepath.Join(badDir, "*.ckpt"))
	sort.Strings(inputs)
	if len(inputs) < len(badCorpus(t)) {
		t.Fatalf("found %d bad inputs in %s, want %d; run go test -update", len(inputs), badDir, len(badCorpus(t)))
	}
	for _, path := range inputs {
		name := strings.TrimSuffix(filepath.Base(path), ".ckpt")
		t.Run(name, func(t *testing.T) {
			_, err := Read(path)
			if err == nil {
				t.Fatalf("%s decoded without error", path)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != path {
				t.Fatalf("err = %v, want an *Error naming %s", err, path)
			}
			golden.Check(t, filepath.Join(badDir, name+".err"), []byte(err.Error()+"\n"))
		})
	}
}
