package tensor

import "errors"

// ErrShape reports tensors whose shapes do not fit the operation.
var ErrShape = errors.New("shape mismatch")

// ErrInvalidShape reports a shape with a negative dimension or too many elements.
var ErrInvalidShape = errors.New("invalid shape")

// ErrConvGeometry reports convolution or pooling parameters that give no output.
var ErrConvGeometry = errors.New("invalid convolution geometry")
