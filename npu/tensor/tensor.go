package tensor

import (
	"fmt"
	"math"
	"slices"
)

// maxElements caps a tensor's element count so a shape read from a file cannot
// ask for more memory than a device could ever hold.
const maxElements = 1 << 40

// Tensor is a float32 tensor with a shape and contiguous row-major data.
type Tensor struct {
	shape []int
	data  []float32
}

// New returns a zeroed tensor of the given shape.
func New(shape ...int) (*Tensor, error) {
	n, err := numElements(shape)
	if err != nil {
		return nil, err
	}
	return &Tensor{shape: append([]int(nil), shape...), data: Alloc(n)}, nil
}

// FromSlice returns a tensor of the given shape that uses data as its storage
// (no copy). len(data) must equal the shape's element count.
func FromSlice(data []float32, shape ...int) (*Tensor, error) {
	n, err := numElements(shape)
	if err != nil {
		return nil, err
	}
	if len(data) != n {
		return nil, fmt.Errorf("%d values for shape %v (%d elements): %w", len(data), slices.Clone(shape), n, ErrShape)
	}
	return &Tensor{shape: append([]int(nil), shape...), data: data}, nil
}

// numElements returns the product of shape. Error paths format a copy of
// shape so the slice never escapes: callers pass variadic shapes, and a
// leaking parameter would make every such call allocate.
func numElements(shape []int) (int, error) {
	n := 1
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v: dimension %d is %d: %w", slices.Clone(shape), i, d, ErrInvalidShape)
		}
		if d != 0 && n > maxElements/d {
			return 0, fmt.Errorf("shape %v: more than %d elements: %w", slices.Clone(shape), int64(maxElements), ErrInvalidShape)
		}
		n *= d
	}
	return n, nil
}

// Shape returns the tensor's dimensions. The slice belongs to the tensor:
// read it, do not modify it.
func (t *Tensor) Shape() []int { return t.shape }

// Rank returns the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// Dim returns dimension i, or 0 when i is out of range.
func (t *Tensor) Dim(i int) int {
	if i < 0 || i >= len(t.shape) {
		return 0
	}
	return t.shape[i]
}

// Len returns the number of elements.
func (t *Tensor) Len() int { return len(t.data) }

// Data returns the tensor's storage in row-major order.
func (t *Tensor) Data() []float32 { return t.data }

// String returns the shape, for error messages.
func (t *Tensor) String() string { return fmt.Sprintf("tensor%v", t.shape) }

// HasShape reports whether the tensor's shape equals dims.
func (t *Tensor) HasShape(dims ...int) bool {
	if len(dims) != len(t.shape) {
		return false
	}
	for i, d := range dims {
		if t.shape[i] != d {
			return false
		}
	}
	return true
}

// SameShape reports whether a and b have equal shapes.
func SameShape(a, b *Tensor) bool { return a.HasShape(b.shape...) }

// Reshape changes the shape in place, keeping the data. The new shape must
// have the same element count.
func (t *Tensor) Reshape(shape ...int) error {
	n, err := numElements(shape)
	if err != nil {
		return err
	}
	if n != len(t.data) {
		return fmt.Errorf("reshape %v to %v: %d elements, want %d: %w", t.shape, slices.Clone(shape), n, len(t.data), ErrShape)
	}
	if cap(t.shape) >= len(shape) {
		t.shape = t.shape[:len(shape)]
		copy(t.shape, shape)
	} else {
		t.shape = append([]int(nil), shape...)
	}
	return nil
}

// Zero sets every element to 0.
func (t *Tensor) Zero() { clear(t.data) }

// Fill sets every element to v.
func (t *Tensor) Fill(v float32) {
	for i := range t.data {
		t.data[i] = v
	}
}

// Copy copies src into dst; the shapes must be equal.
func (dst *Tensor) Copy(src *Tensor) error {
	if !SameShape(dst, src) {
		return fmt.Errorf("copy %v into %v: %w", src.shape, dst.shape, ErrShape)
	}
	copy(dst.data, src.data)
	return nil
}

// Add writes a+b element-wise into dst; all three shapes must be equal. dst
// may be a or b.
func (dst *Tensor) Add(a, b *Tensor) error {
	if !SameShape(a, b) || !SameShape(dst, a) {
		return fmt.Errorf("add %v and %v into %v: %w", a.shape, b.shape, dst.shape, ErrShape)
	}
	d, x, y := dst.data, a.data, b.data[:len(a.data)]
	for i := range d {
		d[i] = x[i] + y[i]
	}
	return nil
}

// Scale writes alpha*a into dst; the shapes must be equal. dst may be a.
func (dst *Tensor) Scale(alpha float32, a *Tensor) error {
	if !SameShape(dst, a) {
		return fmt.Errorf("scale %v into %v: %w", a.shape, dst.shape, ErrShape)
	}
	d, x := dst.data, a.data
	for i := range d {
		d[i] = alpha * x[i]
	}
	return nil
}

// MatMul writes op(a)·op(b) into dst, where op transposes its operand when the
// matching flag is set. a, b and dst must be matrices (rank 2) with
// op(a) m×k, op(b) k×n and dst m×n. dst must not share storage with a or b.
func (dst *Tensor) MatMul(a, b *Tensor, transA, transB bool) error {
	return matMul(nil, dst, a, b, transA, transB)
}

// MatMul is Tensor.MatMul spread over the workers.
func (w *Workers) MatMul(dst, a, b *Tensor, transA, transB bool) error {
	return matMul(w, dst, a, b, transA, transB)
}

func matMul(w *Workers, dst, a, b *Tensor, transA, transB bool) error {
	if a.Rank() != 2 || b.Rank() != 2 || dst.Rank() != 2 {
		return fmt.Errorf("matmul %v × %v into %v: operands must be matrices: %w", a.shape, b.shape, dst.shape, ErrShape)
	}
	m, ka := a.shape[0], a.shape[1]
	if transA {
		m, ka = ka, m
	}
	kb, n := b.shape[0], b.shape[1]
	if transB {
		kb, n = n, kb
	}
	if ka != kb || dst.shape[0] != m || dst.shape[1] != n {
		return fmt.Errorf("matmul %v(transpose %t) × %v(transpose %t) into %v: %w",
			a.shape, transA, b.shape, transB, dst.shape, ErrShape)
	}
	w.Gemm(transA, transB, m, n, ka, 1, a.data, a.shape[1], b.data, b.shape[1], 0, dst.data, n)
	return nil
}

// AllFinite reports whether no element is NaN or ±Inf.
func (t *Tensor) AllFinite() bool {
	for _, v := range t.data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return false
		}
	}
	return true
}
