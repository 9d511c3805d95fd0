package parallel

import (
	"fmt"
	"math"
	"slices"
)

// TensorLayout is the layout of one parameter in a strategy file
// (MindSpore's ParallelLayouts).
//
// DeviceMatrix and TensorMap mean what they mean in [Layout]. An uneven
// split (MindSpore's manual split of an embedding table, the Gather
// operator's manual_split) splits dimension 0 only, into the slices the
// tensor map gives it; ParamSplitShape[j] is the size along dimension 0 of
// slice j and IndicesOffset[j] where it starts. The slices follow each
// other without gap or overlap, so IndicesOffset[0] is 0 and each offset is
// the previous one plus the previous size. Both are empty for an even
// split.
//
// Field is the field size of a field-split embedding table (MindSpore
// reorders such a table's rows when it merges it); 0 for every other
// parameter. OptWeightShardStep and OptWeightShardSize describe the
// parallel optimizer: when both are positive, the ranks that hold the same
// model-parallel slice hold a further split of it along dimension 0, into
// OptWeightShardSize pieces; OptWeightShardStep is then the number of
// model-parallel slices. 0 (or -1, which some MindSpore tools write for the
// size) means no optimizer sharding.
type TensorLayout struct {
	DeviceMatrix, TensorMap        []int
	ParamSplitShape, IndicesOffset []int // uneven splits (MindSpore's manual split); empty when even
	Field                          int
	OptWeightShardStep             int
	OptWeightShardSize             int
	// Shape is the whole tensor's shape when the file records it: the JSON
	// form does (MindSpore's tensor_shape, which its JSON reader requires),
	// the protobuf form does not. Nil when unknown.
	Shape []int
}

// Devices returns the number of devices of the layout's device matrix.
func (l TensorLayout) Devices() int {
	return Layout{DeviceMatrix: l.DeviceMatrix}.Devices()
}

// TensorLayoutOf returns the strategy file entry of an even layout, with
// its shape recorded: what training writes for each parameter.
func TensorLayoutOf(l Layout) TensorLayout {
	return TensorLayout{DeviceMatrix: slices.Clone(l.DeviceMatrix), TensorMap: slices.Clone(l.TensorMap), Shape: slices.Clone(l.Shape)}
}

// Layout returns the even layout of a tensor of the given shape: the device
// matrix and tensor map, without the uneven split and optimizer sharding.
func (l TensorLayout) Layout(shape []int) Layout {
	return Layout{DeviceMatrix: slices.Clone(l.DeviceMatrix), TensorMap: slices.Clone(l.TensorMap), Shape: slices.Clone(shape)}
}

// Validate checks the layout on its own: a device matrix of at most 2^20
// devices, a tensor map naming existing axes at most once each, an uneven
// split that splits dimension 0 only into consecutive slices, optimizer
// sharding consistent with the device matrix, and, when Shape is known,
// that the layout tiles it.
func (l TensorLayout) Validate() error {
	if len(l.DeviceMatrix) > maxLayoutDims || len(l.TensorMap) > maxLayoutDims || len(l.Shape) > maxLayoutDims {
		return fmt.Errorf("%w: device matrix, tensor map or shape longer than %d", ErrLayout, maxLayoutDims)
	}
	if _, err := shardProduct(l.DeviceMatrix); err != nil || len(l.DeviceMatrix) == 0 {
		return fmt.Errorf("%w: device matrix %v: want 1 to %d entries of at least 1, at most %d devices", ErrLayout, l.DeviceMatrix, maxLayoutDims, maxDevices)
	}
	// Layout.Validate checks the tensor map; on a shape of zeros every
	// split divides, so the divisibility check waits until a shape is known.
	zeros := make([]int, len(l.TensorMap))
	if err := (Layout{DeviceMatrix: l.DeviceMatrix, TensorMap: l.TensorMap, Shape: zeros}).Validate(); err != nil {
		return err
	}
	if err := l.validateUneven(); err != nil {
		return err
	}
	if l.Field < 0 || l.Field > math.MaxInt32 {
		return fmt.Errorf("%w: field %d is negative or too large", ErrLayout, l.Field)
	}
	if err := l.validateOptShard(); err != nil {
		return err
	}
	if l.Shape != nil {
		return l.checkShape(l.Shape)
	}
	return nil
}

// splits returns how many slices the tensor map cuts dimension k into.
func (l TensorLayout) splits(k int) int {
	if m := l.TensorMap[k]; m >= 0 {
		return l.DeviceMatrix[len(l.DeviceMatrix)-1-m]
	}
	return 1
}

// modelParallelSlices returns the number of distinct slices the tensor map
// cuts the tensor into (MindSpore's product of the tensor strategy).
func (l TensorLayout) modelParallelSlices() int {
	n := 1
	for k := range l.TensorMap {
		n *= l.splits(k)
	}
	return n
}

func (l TensorLayout) uneven() bool { return len(l.ParamSplitShape) > 0 || len(l.IndicesOffset) > 0 }

func (l TensorLayout) optSharded() bool { return l.OptWeightShardStep > 0 && l.OptWeightShardSize > 0 }

func (l TensorLayout) validateUneven() error {
	if !l.uneven() {
		return nil
	}
	if len(l.ParamSplitShape) != len(l.IndicesOffset) {
		return fmt.Errorf("%w: param_split_shape %v and indices_offset %v differ in length", ErrLayout, l.ParamSplitShape, l.IndicesOffset)
	}
	if len(l.TensorMap) == 0 || l.TensorMap[0] < 0 {
		return fmt.Errorf("%w: param_split_shape %v given, but tensor map %v does not split dimension 0", ErrLayout, l.ParamSplitShape, l.TensorMap)
	}
	for k := 1; k < len(l.TensorMap); k++ {
		if l.TensorMap[k] >= 0 {
			return fmt.Errorf("%w: tensor map %v splits dimension %d; an uneven split (param_split_shape) splits dimension 0 only", ErrLayout, l.TensorMap, k)
		}
	}
	if n := l.splits(0); len(l.ParamSplitShape) != n {
		return fmt.Errorf("%w: param_split_shape %v has %d slices, tensor map %v on device matrix %v cuts dimension 0 into %d",
			ErrLayout, l.ParamSplitShape, len(l.ParamSplitShape), l.TensorMap, l.DeviceMatrix, n)
	}
	var next int64 // int64: a sum of many sizes overflows a 32-bit int
	for j, size := range l.ParamSplitShape {
		if size < 1 || size > maxDimSize {
			return fmt.Errorf("%w: param_split_shape %v: slice %d has size %d, want 1 to %d", ErrLayout, l.ParamSplitShape, j, size, maxDimSize)
		}
		switch off := int64(l.IndicesOffset[j]); {
		case off < next:
			return fmt.Errorf("%w: indices_offset %v: slice %d starts at %d, inside the slices before it (they end at %d)", ErrLayout, l.IndicesOffset, j, off, next)
		case off > next:
			return fmt.Errorf("%w: indices_offset %v: slice %d starts at %d, leaving rows %d to %d in no slice", ErrLayout, l.IndicesOffset, j, off, next, off-1)
		}
		next += int64(size)
	}
	return nil
}

func (l TensorLayout) validateOptShard() error {
	if l.OptWeightShardStep < 0 || l.OptWeightShardSize < -1 || l.OptWeightShardStep > maxDevices || l.OptWeightShardSize > maxDevices {
		return fmt.Errorf("%w: opt_weight_shard_step %d, opt_weight_shard_size %d: want 0 to %d (size may be -1)", ErrLayout, l.OptWeightShardStep, l.OptWeightShardSize, maxDevices)
	}
	if !l.optSharded() {
		return nil
	}
	if l.uneven() {
		return fmt.Errorf("%w: optimizer sharding (opt_weight_shard_size %d) of an unevenly split parameter", ErrLayout, l.OptWeightShardSize)
	}
	if len(l.TensorMap) == 0 {
		return fmt.Errorf("%w: optimizer sharding (opt_weight_shard_size %d) of a scalar", ErrLayout, l.OptWeightShardSize)
	}
	if n := l.modelParallelSlices(); l.OptWeightShardStep != n {
		return fmt.Errorf("%w: opt_weight_shard_step %d, but the tensor map cuts the tensor into %d slices", ErrLayout, l.OptWeightShardStep, n)
	}
	if d, used := l.Devices(), l.OptWeightShardStep*l.OptWeightShardSize; d%used != 0 {
		return fmt.Errorf("%w: opt_weight_shard_step %d times opt_weight_shard_size %d does not divide the %d devices", ErrLayout, l.OptWeightShardStep, l.OptWeightShardSize, d)
	}
	return nil
}

// Boxes returns the part of the whole tensor (shape) that each of the
// layout's devices holds, in rank order.
//
// An even split comes from the device matrix and tensor map ([Layout.Box]).
// An uneven one takes dimension 0's slices from ParamSplitShape and
// IndicesOffset: the rank whose device matrix coordinate puts it in slice j
// of dimension 0 holds rows IndicesOffset[j] to
// IndicesOffset[j]+ParamSplitShape[j]-1, and their sum must be shape[0].
// With optimizer sharding, each rank holds the piece its checkpoint holds
// when MindSpore saves without aggregating the shards: MindSpore lays the
// ranks out as [repeat, OptWeightShardSize, the tensor's splits...]
// row-major, so rank r holds model-parallel slice r mod OptWeightShardStep
// and, of that slice's dimension 0, piece (r / OptWeightShardStep) mod
// OptWeightShardSize.
//
// Errors for a shape the layout does not tile (wrong rank, a dimension not
// divisible, uneven slices that do not add up to it), for a Shape recorded
// in the layout that differs, and for field-split layouts (Field > 0),
// whose slices are not boxes.
func (l TensorLayout) Boxes(shape []int) ([]Box, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l.Shape != nil && !slices.Equal(l.Shape, shape) {
		return nil, fmt.Errorf("%w: shape %v, but the layout records tensor_shape %v", ErrLayout, shape, l.Shape)
	}
	return l.boxes(shape)
}

// checkShape checks that the layout, whose own fields are valid, tiles a
// tensor of the given shape, without listing the boxes.
func (l TensorLayout) checkShape(shape []int) error {
	if len(shape) != len(l.TensorMap) {
		return fmt.Errorf("%w: tensor map %v has %d entries for a tensor of %d dimensions %v", ErrLayout, l.TensorMap, len(l.TensorMap), len(shape), shape)
	}
	for k, d := range shape {
		if d < 0 || d > maxDimSize {
			return fmt.Errorf("%w: shape %v: dimension %d is %d, want 0 to %d", ErrLayout, shape, k, d, maxDimSize)
		}
	}
	switch {
	case l.Field > 0:
		return nil // MindSpore's field reordering has no rule for the shape to follow
	case l.uneven():
		var total int64
		for _, size := range l.ParamSplitShape {
			total += int64(size)
		}
		if total != int64(shape[0]) {
			return fmt.Errorf("%w: param_split_shape %v adds up to %d rows, the tensor %v has %d", ErrLayout, l.ParamSplitShape, total, shape, shape[0])
		}
		return nil
	}
	if err := l.Layout(shape).Validate(); err != nil {
		return err
	}
	if l.optSharded() {
		if slice0 := shape[0] / l.splits(0); slice0%l.OptWeightShardSize != 0 {
			return fmt.Errorf("%w: shape %v: the slices' dimension 0 of %d rows does not divide into opt_weight_shard_size %d pieces", ErrLayout, shape, slice0, l.OptWeightShardSize)
		}
	}
	return nil
}

// boxes is Boxes on a layout whose own fields are valid.
func (l TensorLayout) boxes(shape []int) ([]Box, error) {
	if l.Field > 0 {
		return nil, fmt.Errorf("%w: field %d: the slices of a field-split embedding table are not boxes; not supported", ErrLayout, l.Field)
	}
	if err := l.checkShape(shape); err != nil {
		return nil, err
	}
	switch {
	case l.uneven():
		return l.unevenBoxes(shape)
	case l.optSharded():
		return l.optShardBoxes(shape)
	}
	even := l.Layout(shape)
	boxes := make([]Box, l.Devices())
	for r := range boxes {
		b, err := even.Box(r)
		if err != nil {
			return nil, err
		}
		boxes[r] = b
	}
	return boxes, nil
}

func (l TensorLayout) unevenBoxes(shape []int) ([]Box, error) {
	axis := len(l.DeviceMatrix) - 1 - l.TensorMap[0]
	grid := Layout{DeviceMatrix: l.DeviceMatrix}
	boxes := make([]Box, l.Devices())
	for r := range boxes {
		coord, err := grid.Coordinate(r)
		if err != nil {
			return nil, err
		}
		j := coord[axis]
		b := Box{Offset: make([]int, len(shape)), Shape: slices.Clone(shape)}
		b.Offset[0], b.Shape[0] = l.IndicesOffset[j], l.ParamSplitShape[j]
		boxes[r] = b
	}
	return boxes, nil
}

func (l TensorLayout) optShardBoxes(shape []int) ([]Box, error) {
	// The model-parallel slices, numbered row-major over the tensor's
	// splits, as MindSpore's optimizer-shard layout numbers them.
	splits := make([]int, len(shape))
	slice := make([]int, len(shape))
	for k := range shape {
		splits[k] = l.splits(k)
		slice[k] = shape[k] / splits[k]
	}
	size := l.OptWeightShardSize
	piece := slice[0] / size
	boxes := make([]Box, l.Devices())
	for r := range boxes {
		b := Box{Offset: make([]int, len(shape)), Shape: slices.Clone(slice)}
		rest := r % l.OptWeightShardStep
		for k := len(shape) - 1; k >= 0; k-- {
			b.Offset[k] = rest % splits[k] * slice[k]
			rest /= splits[k]
		}
		b.Offset[0] += (r / l.OptWeightShardStep) % size * piece
		b.Shape[0] = piece
		boxes[r] = b
	}
	return boxes, nil
}
