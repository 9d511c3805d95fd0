package parallel

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Strategy holds the shard strategy of each operator, as a spec writes it:
// {fc.matmul: [[1, 1], [1, 2]]} splits the second input of fc.matmul in
// two along its second dimension. Each operator has one list per input,
// with one entry per input dimension: how many slices that dimension is
// split into.
type Strategy map[string][][]int

// Validate checks every operator's strategy against a job of devices
// devices: each input splits its dimensions at least one way each, into a
// number of slices that divides the device count (the remaining devices
// repeat the calculation). All problems are returned, operators in name
// order.
func (s Strategy) Validate(devices int) error {
	if devices < 1 {
		return fmt.Errorf("%w: %d devices", ErrStrategy, devices)
	}
	var errs []error
	for _, op := range slices.Sorted(maps.Keys(s)) {
		if op == "" {
			errs = append(errs, fmt.Errorf("%w: an operator without a name", ErrStrategy))
			continue
		}
		if len(s[op]) == 0 {
			errs = append(errs, fmt.Errorf("%w: operator %s: no inputs", ErrStrategy, op))
		}
		for i, shard := range s[op] {
			used, err := shardProduct(shard)
			if err == nil && devices%used != 0 {
				err = fmt.Errorf("%w: %v uses %d devices, which does not divide the job's %d", ErrStrategy, shard, used, devices)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("operator %s input %d: %w", op, i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Layouts returns the layout of each input of op, whose whole shapes are
// given, on a job of devices devices. An operator without a strategy runs
// data parallel: its inputs are split along their first dimension over all
// devices, as MindSpore does with operators a semi_auto_parallel network
// leaves unset.
func (s Strategy) Layouts(op string, shapes [][]int, devices int) ([]Layout, error) {
	shards, ok := s[op]
	if !ok {
		shards = make([][]int, len(shapes))
		for i, shape := range shapes {
			shards[i] = dataParallelShard(len(shape), devices)
		}
	}
	if len(shards) != len(shapes) {
		return nil, fmt.Errorf("%w: operator %s has %d inputs, the strategy gives %d", ErrStrategy, op, len(shapes), len(shards))
	}
	out := make([]Layout, len(shapes))
	for i := range shapes {
		l, err := SplitLayout(shapes[i], shards[i], devices)
		if err != nil {
			return nil, fmt.Errorf("operator %s input %d: %w", op, i, err)
		}
		out[i] = l
	}
	return out, nil
}

// dataParallelShard splits the first of dims dimensions over all devices.
func dataParallelShard(dims, devices int) []int {
	shard := make([]int, dims)
	for k := range shard {
		shard[k] = 1
	}
	if dims > 0 {
		shard[0] = devices
	}
	return shard
}
