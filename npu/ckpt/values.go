package ckpt

import (
	"fmt"
	"slices"
)

// value is one Checkpoint.Value: its place in the file, its header, and
// its data C — the bytes themselves (Decode) or where they lie (Index).
type value[C any] struct {
	index   int
	offset  int64
	tag     string
	dims    []int64
	dtype   string
	content C
}

// joinValues joins runs of consecutive Values with the same tag into one
// tensor each, keeping file order: a tag may not come back after another
// one. size tells a Value's data bytes; build makes the tensor of a run
// whose dims and total bytes runDims has checked.
func joinValues[C, T any](name string, values []value[C], size func(value[C]) int64, build func(run []value[C], dims []int64, total int64) T) ([]T, error) {
	var tensors []T
	firstSeen := make(map[string]int, len(values))
	for start := 0; start < len(values); {
		end := start + 1
		for end < len(values) && values[end].tag == values[start].tag {
			end++
		}
		run := values[start:end]
		first := run[0]
		if prev, dup := firstSeen[first.tag]; dup {
			return nil, &Error{File: name, Tensor: first.tag, Value: first.index, Offset: first.offset,
				Err: fmt.Errorf("tag already used by value[%d]: %w", prev, ErrName)}
		}
		firstSeen[first.tag] = first.index
		dims, total, bad, err := runDims(run, size)
		if err != nil {
			return nil, &Error{File: name, Tensor: bad.tag, Value: bad.index, Offset: bad.offset, Err: err}
		}
		tensors = append(tensors, build(run, dims, total))
		start = end
	}
	return tensors, nil
}

// runDims returns the dims and data bytes of the tensor a run of slices
// makes. MindSpore gives every slice the dims of the whole tensor; a writer
// that gives each slice its own dims (split along axis 0, trailing dims
// equal) is accepted too. On error it also returns the slice to blame.
func runDims[C any](run []value[C], size func(value[C]) int64) ([]int64, int64, value[C], error) {
	first := run[0]
	var total int64
	sameDims := true
	for _, v := range run {
		if v.dtype != first.dtype {
			return nil, 0, v, fmt.Errorf("slice has dtype %s, value[%d] has %s: %w", v.dtype, first.index, first.dtype, ErrShape)
		}
		total += size(v)
		sameDims = sameDims && slices.Equal(v.dims, first.dims)
	}
	if sameDims {
		last := run[len(run)-1]
		dims, err := wholeDims(last.dims, last.dtype, total, len(run))
		if err != nil {
			return nil, 0, last, err
		}
		return dims, total, value[C]{}, nil
	}
	// Each slice carries its own dims: every slice must be consistent on
	// its own, all must share the trailing dims, and dim 0 is the sum.
	var rows int64
	for _, v := range run {
		if len(v.dims) == 0 || len(v.dims) != len(first.dims) || !slices.Equal(v.dims[1:], first.dims[1:]) {
			return nil, 0, v, fmt.Errorf("slice dims %v do not continue value[%d] dims %v along axis 0: %w", v.dims, first.index, first.dims, ErrShape)
		}
		want, err := byteSize(v.dims, v.dtype)
		if err != nil {
			return nil, 0, v, err
		}
		if size(v) != want {
			return nil, 0, v, fmt.Errorf("slice data is %d bytes, want %d for %s %v: %w", size(v), want, v.dtype, v.dims, ErrShape)
		}
		if v.dims[0] > (1<<63-1)-rows {
			return nil, 0, v, fmt.Errorf("axis 0 sum overflows int64: %w", ErrShape)
		}
		rows += v.dims[0]
	}
	dims := append([]int64{rows}, first.dims[1:]...)
	if _, err := byteSize(dims, first.dtype); err != nil {
		return nil, 0, first, err
	}
	return dims, total, value[C]{}, nil
}
