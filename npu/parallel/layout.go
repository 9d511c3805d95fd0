package parallel

import (
	"fmt"
	"slices"
)

// Layout is how one tensor is spread over the devices of a job, as
// MindSpore's strategy files write it (see the package documentation).
type Layout struct {
	// DeviceMatrix arranges the devices in a grid; its product is the
	// device count.
	DeviceMatrix []int
	// TensorMap has one entry per tensor dimension: -1 (not split) or the
	// device matrix axis counted from the right.
	TensorMap []int
	// Shape is the whole tensor's shape.
	Shape []int
}

// Box is a rectangular part of a tensor: the slice starting at Offset
// with the given Shape.
type Box struct {
	Offset, Shape []int
}

// Devices returns the number of devices of the device matrix.
func (l Layout) Devices() int {
	n := 1
	for _, d := range l.DeviceMatrix {
		n *= d
	}
	return n
}

// Validate checks that the device matrix is positive, that the tensor map
// has one entry per dimension, names existing axes at most once each, and
// that every split dimension divides evenly.
func (l Layout) Validate() error {
	if len(l.DeviceMatrix) == 0 {
		return fmt.Errorf("%w: empty device matrix", ErrLayout)
	}
	for i, d := range l.DeviceMatrix {
		if d < 1 {
			return fmt.Errorf("%w: device matrix %v: axis %d is %d, want at least 1", ErrLayout, l.DeviceMatrix, i, d)
		}
	}
	if len(l.TensorMap) != len(l.Shape) {
		return fmt.Errorf("%w: tensor map %v has %d entries for a tensor of %d dimensions %v", ErrLayout, l.TensorMap, len(l.TensorMap), len(l.Shape), l.Shape)
	}
	used := make([]bool, len(l.DeviceMatrix))
	for k, m := range l.TensorMap {
		if l.Shape[k] < 0 {
			return fmt.Errorf("%w: shape %v: dimension %d is negative", ErrLayout, l.Shape, k)
		}
		if m == -1 {
			continue
		}
		if m < -1 || m >= len(l.DeviceMatrix) {
			return fmt.Errorf("%w: tensor map %v: entry %d is %d, want -1 or 0 to %d (device matrix %v)", ErrLayout, l.TensorMap, k, m, len(l.DeviceMatrix)-1, l.DeviceMatrix)
		}
		axis := len(l.DeviceMatrix) - 1 - m
		if used[axis] {
			return fmt.Errorf("%w: tensor map %v: device matrix axis %d splits two dimensions", ErrLayout, l.TensorMap, axis)
		}
		used[axis] = true
		if n := l.DeviceMatrix[axis]; l.Shape[k]%n != 0 {
			return fmt.Errorf("%w: dimension %d of shape %v is %d, not divisible into %d slices", ErrLayout, k, l.Shape, l.Shape[k], n)
		}
	}
	return nil
}

// Coordinate returns rank's position in the device matrix, row-major.
func (l Layout) Coordinate(rank int) ([]int, error) {
	if n := l.Devices(); rank < 0 || rank >= n {
		return nil, fmt.Errorf("%w: rank %d is outside device matrix %v of %d devices", ErrLayout, rank, l.DeviceMatrix, n)
	}
	coord := make([]int, len(l.DeviceMatrix))
	for i := len(coord) - 1; i >= 0; i-- {
		coord[i] = rank % l.DeviceMatrix[i]
		rank /= l.DeviceMatrix[i]
	}
	return coord, nil
}

// SliceShape returns the shape of every rank's slice.
func (l Layout) SliceShape() ([]int, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	shape := slices.Clone(l.Shape)
	for k, m := range l.TensorMap {
		if m >= 0 {
			shape[k] /= l.DeviceMatrix[len(l.DeviceMatrix)-1-m]
		}
	}
	return shape, nil
}

// Box returns the part of the whole tensor that rank holds.
func (l Layout) Box(rank int) (Box, error) {
	shape, err := l.SliceShape()
	if err != nil {
		return Box{}, err
	}
	coord, err := l.Coordinate(rank)
	if err != nil {
		return Box{}, err
	}
	offset := make([]int, len(shape))
	for k, m := range l.TensorMap {
		if m >= 0 {
			offset[k] = coord[len(coord)-1-m] * shape[k]
		}
	}
	return Box{Offset: offset, Shape: shape}, nil
}

// Intersect returns the part two boxes of the same tensor have in common;
// ok is false when they do not overlap.
func (b Box) Intersect(o Box) (common Box, ok bool) {
	if len(b.Offset) != len(o.Offset) {
		return Box{}, false
	}
	common = Box{Offset: make([]int, len(b.Offset)), Shape: make([]int, len(b.Offset))}
	for k := range b.Offset {
		lo := max(b.Offset[k], o.Offset[k])
		hi := min(b.Offset[k]+b.Shape[k], o.Offset[k]+o.Shape[k])
		if hi <= lo {
			return Box{}, false
		}
		common.Offset[k], common.Shape[k] = lo, hi-lo
	}
	return common, true
}

// SplitLayout returns the layout MindSpore gives a tensor of the given
// shape that an operator input strategy splits shard[k] ways along
// dimension k on a job of devices devices: the devices the strategy does
// not use repeat the calculation along a leading device matrix axis
// (omitted when there are none), and dimension k maps to the matrix axis of
// shard[k].
func SplitLayout(shape, shard []int, devices int) (Layout, error) {
	if len(shard) != len(shape) {
		return Layout{}, fmt.Errorf("%w: %v has %d entries for a tensor of %d dimensions %v", ErrStrategy, shard, len(shard), len(shape), shape)
	}
	used, err := shardProduct(shard)
	if err != nil {
		return Layout{}, err
	}
	if devices < 1 || devices%used != 0 {
		return Layout{}, fmt.Errorf("%w: %v uses %d devices, which does not divide the job's %d", ErrStrategy, shard, used, devices)
	}
	l := Layout{Shape: slices.Clone(shape), TensorMap: make([]int, len(shard))}
	if repeat := devices / used; repeat > 1 {
		l.DeviceMatrix = append(l.DeviceMatrix, repeat)
	}
	l.DeviceMatrix = append(l.DeviceMatrix, shard...)
	for k := range shard {
		l.TensorMap[k] = len(shard) - 1 - k
	}
	if len(shard) == 0 {
		l.DeviceMatrix = []int{devices} // a scalar: every device holds it
	}
	if err := l.Validate(); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// maxDevices bounds the slices a strategy may ask for, far above any
// cluster, so that products of numbers from a spec cannot overflow.
const maxDevices = 1 << 20

func shardProduct(shard []int) (int, error) {
	n := 1
	for k, s := range shard {
		if s < 1 {
			return 0, fmt.Errorf("%w: %v: dimension %d is split %d ways, want at least 1", ErrStrategy, shard, k, s)
		}
		if n *= s; n > maxDevices {
			return 0, fmt.Errorf("%w: %v splits into more than %d slices", ErrStrategy, shard, maxDevices)
		}
	}
	return n, nil
}
