package parallel

import "fmt"

// Repeats returns how many ranks hold each slice of a tensor laid out by
// l: the devices over the number of distinct slices (the device matrix
// axes the tensor map leaves out).
func (l Layout) Repeats() (int, error) {
	shape, err := l.SliceShape()
	if err != nil {
		return 0, err
	}
	slices := 1
	for k, m := range l.TensorMap {
		if m >= 0 {
			slices *= l.Shape[k] / shape[k]
		}
	}
	return l.Devices() / slices, nil
}

// OptimizerPieces is MindSpore's parallel optimizer rule, the one npu/shard
// runs and the cost model prices: the number of pieces the update of
// parameter t is split into when repeats ranks hold each of its slices,
// of shape slice, and optimizer_weight_shard_size is shardSize (0, or
// more than repeats: all of them). It is 1 when t stays whole: t is frozen
// (no optimizer updates it, so it has no moment to split), no other rank
// holds its slice, or the slice's dimension 0 does not divide into the
// pieces. A shard size that does not divide repeats is an error wrapping
// ErrOptimizerShard that names t. Whether the optimizer is on at all is
// the caller's to say.
func OptimizerPieces(t TensorSpec, slice []int, repeats, shardSize int) (int, error) {
	if t.Frozen || repeats < 2 {
		return 1, nil
	}
	size := shardSize
	if size <= 0 || size > repeats {
		size = repeats
	}
	if repeats%size != 0 {
		return 0, fmt.Errorf("%w: parameter %s is repeated on %d ranks, which optimizer_weight_shard_size %d does not divide", ErrOptimizerShard, t.Name, repeats, size)
	}
	if size == 1 || len(slice) == 0 || slice[0]%size != 0 {
		return 1, nil
	}
	return size, nil
}
