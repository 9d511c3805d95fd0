package ckpt

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"
)

// Tensor is one named parameter of a checkpoint.
type Tensor struct {
	Name  string  // parameter name, e.g. "conv1.weight" or "moments.conv1.weight"
	Dims  []int64 // shape; empty for a scalar
	DType string  // MindSpore dtype name, e.g. "Float32" (see DTypeSize)
	Data  []byte  // elements in row-major order, little-endian
}

// NewFloat32 returns a Float32 tensor holding a copy of values, which must
// have exactly as many elements as dims describe.
func NewFloat32(name string, dims []int64, values []float32) (Tensor, error) {
	t := Tensor{Name: name, Dims: append([]int64(nil), dims...), DType: DTypeFloat32}
	n, err := t.NumElements()
	if err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	if n != int64(len(values)) {
		return Tensor{}, fmt.Errorf("tensor %q: %d values for dims %v (%d elements): %w", name, len(values), dims, n, ErrShape)
	}
	t.Data = make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(v))
	}
	return t, nil
}

// NumElements returns the product of the dims (1 for a scalar), or ErrShape
// when a dim is negative or the product overflows int64.
func (t Tensor) NumElements() (int64, error) {
	return numElements(t.Dims)
}

func numElements(dims []int64) (int64, error) {
	n := int64(1)
	for _, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("negative dim in %v: %w", dims, ErrShape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("dims %v overflow int64: %w", dims, ErrShape)
		}
		n *= d
	}
	return n, nil
}

// byteSize returns the data size dims and dtype call for.
func byteSize(dims []int64, dtype string) (int64, error) {
	size, ok := DTypeSize(dtype)
	if !ok {
		return 0, fmt.Errorf("%w %q", ErrDType, clip(dtype))
	}
	n, err := numElements(dims)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64/int64(size) {
		return 0, fmt.Errorf("dims %v of %s overflow int64 bytes: %w", dims, dtype, ErrShape)
	}
	return n * int64(size), nil
}

// Validate checks that t could be written and read back: a non-empty UTF-8
// name, a known dtype, valid dims, and exactly the data they describe.
func (t Tensor) Validate() error {
	if err := checkName(t.Name); err != nil {
		return err
	}
	want, err := byteSize(t.Dims, t.DType)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if int64(len(t.Data)) != want {
		return fmt.Errorf("tensor %q: data is %d bytes, want %d for %s %v: %w", t.Name, len(t.Data), want, t.DType, t.Dims, ErrShape)
	}
	return nil
}

func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("empty name: %w", ErrName)
	}
	if err := checkNameLen(len(name)); err != nil {
		return err
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("name %q is not valid UTF-8: %w", clip(name), ErrName)
	}
	return nil
}

// Float32s returns the elements as float32. Float16, BFloat16 and Float64
// tensors are converted (Float64 rounds to nearest); other dtypes give
// ErrNotFloat.
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.checkFloat(); err != nil {
		return nil, err
	}
	size, _ := DTypeSize(t.DType)
	out := make([]float32, len(t.Data)/size)
	for i := range out {
		switch t.DType {
		case DTypeFloat32:
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		case DTypeFloat16:
			out[i] = halfToFloat32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		case DTypeBFloat16:
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		case DTypeFloat64:
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:])))
		}
	}
	return out, nil
}

// Float64s returns the elements of a float tensor of any width as float64,
// exactly; other dtypes give ErrNotFloat.
func (t Tensor) Float64s() ([]float64, error) {
	if t.DType != DTypeFloat64 {
		f32, err := t.Float32s()
		if err != nil {
			return nil, err
		}
		out := make([]float64, len(f32))
		for i, v := range f32 {
			out[i] = float64(v)
		}
		return out, nil
	}
	if err := t.checkFloat(); err != nil {
		return nil, err
	}
	out := make([]float64, len(t.Data)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return out, nil
}

func (t Tensor) checkFloat() error {
	if !IsFloat(t.DType) {
		return fmt.Errorf("tensor %q has dtype %q: %w", t.Name, clip(t.DType), ErrNotFloat)
	}
	size, _ := DTypeSize(t.DType)
	if len(t.Data)%size != 0 {
		return fmt.Errorf("tensor %q: %d data bytes is not a whole number of %s elements: %w", t.Name, len(t.Data), t.DType, ErrShape)
	}
	return nil
}

// halfToFloat32 converts an IEEE 754 binary16 value; every binary16 value,
// subnormals and NaN payloads included, is exactly representable as float32.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal: rebias 15 -> 127
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	default: // zero or subnormal: mant × 2^-24
		f := float32(mant) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	}
}

// Hash returns the hex SHA-256 of the tensor's content: dtype, dims and data.
// Two tensors with equal hashes hold the same values in the same shape and
// dtype, whatever their names and however the file sliced them.
func (t Tensor) Hash() string {
	h := sha256.New()
	h.Write([]byte(t.DType))
	h.Write([]byte{0})
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(len(t.Dims)))
	h.Write(buf[:])
	for _, d := range t.Dims {
		binary.LittleEndian.PutUint64(buf[:], uint64(d))
		h.Write(buf[:])
	}
	h.Write(t.Data)
	return hex.EncodeToString(h.Sum(nil))
}

// Compare matches want and got by name and returns nil when every tensor of
// want is in got with the same content hash and got has nothing more. The
// error lists every difference, one per wrapped error, sorted by name.
func Compare(want, got []Tensor) error {
	gotByName := make(map[string]Tensor, len(got))
	for _, t := range got {
		gotByName[t.Name] = t
	}
	var problems []string
	wantNames := make(map[string]bool, len(want))
	for _, w := range want {
		wantNames[w.Name] = true
		g, ok := gotByName[w.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("tensor %q: missing", w.Name))
			continue
		}
		if wh, gh := w.Hash(), g.Hash(); wh != gh {
			problems = append(problems, fmt.Sprintf("tensor %q: content differs: want %s %v sha256 %s, got %s %v sha256 %s",
				w.Name, w.DType, w.Dims, wh[:12], g.DType, g.Dims, gh[:12]))
		}
	}
	for _, g := range got {
		if !wantNames[g.Name] {
			problems = append(problems, fmt.Sprintf("tensor %q: unexpected", g.Name))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = errors.New(p)
	}
	return errors.Join(errs...)
}

// MaxNameBytes bounds a tensor name. MindSpore's longest parameter names
// are a few hundred bytes; a longer one is damage or an attack, and would
// cost its size again in every message and index that holds it.
const MaxNameBytes = 4096

// checkNameLen refuses a name of n bytes before it is copied anywhere.
func checkNameLen(n int) error {
	if n > MaxNameBytes {
		return fmt.Errorf("name of %d bytes is over the %d-byte limit: %w", n, MaxNameBytes, ErrName)
	}
	return nil
}

// clip shortens s for an error message, so a garbage dtype or name of
// megabytes does not end up on the terminal.
func clip(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
