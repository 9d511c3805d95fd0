package parallel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrDatasetStrategy marks a dataset_strategy that cannot be used.
var ErrDatasetStrategy = errors.New("invalid dataset_strategy")

// The string forms of a dataset strategy, as MindSpore's
// set_auto_parallel_context accepts them.
const (
	DatasetDataParallel = "data_parallel" // each device loads its shard of the batch (the default)
	DatasetFullBatch    = "full_batch"    // every device loads the whole batch
)

// DatasetStrategy is MindSpore's dataset_strategy: one of the strings
// DatasetDataParallel and DatasetFullBatch, or one split list per dataset
// column (its tuple-of-tuples form), e.g. [[1, 1, 2, 1], [1]] for NCHW
// images cut in two along H and labels left whole. Each device then
// receives the slice of every column its place in the split selects; the
// devices the splits do not use repeat the slices (the product of each list
// must divide the device count). The zero value is unset.
type DatasetStrategy struct {
	Name   string  // a string form, or ""
	Splits [][]int // the tuple form, or nil
}

// IsSet reports whether a strategy was given.
func (d DatasetStrategy) IsSet() bool { return d.Name != "" || d.Splits != nil }

// Sliced reports whether the strategy is the tuple form.
func (d DatasetStrategy) Sliced() bool { return d.Splits != nil }

// UnmarshalJSON accepts a string form or a list of lists of integers.
func (d *DatasetStrategy) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s != DatasetDataParallel && s != DatasetFullBatch {
			return fmt.Errorf("%w: %q: want %q, %q or a list of split lists such as [[1, 1, 2, 1], [1]]", ErrDatasetStrategy, s, DatasetDataParallel, DatasetFullBatch)
		}
		*d = DatasetStrategy{Name: s}
		return nil
	}
	var splits [][]int
	if err := json.Unmarshal(b, &splits); err != nil {
		return fmt.Errorf("%w: want %q, %q or a list of split lists such as [[1, 1, 2, 1], [1]]: %v", ErrDatasetStrategy, DatasetDataParallel, DatasetFullBatch, err)
	}
	if splits == nil {
		splits = [][]int{}
	}
	*d = DatasetStrategy{Splits: splits}
	return nil
}

// MarshalJSON writes the form the strategy was given in.
func (d DatasetStrategy) MarshalJSON() ([]byte, error) {
	if d.Splits != nil {
		return json.Marshal(d.Splits)
	}
	return json.Marshal(d.Name)
}

// JSONSchema describes the accepted forms in a stage's `with` schema.
func (DatasetStrategy) JSONSchema() map[string]any {
	return map[string]any{
		"oneOf": []any{
			map[string]any{"type": "string", "enum": []any{DatasetDataParallel, DatasetFullBatch}},
			map[string]any{"type": "array", "minItems": 1, "items": map[string]any{
				"type": "array", "minItems": 1, "items": map[string]any{"type": "integer", "minimum": 1}}},
		},
	}
}

// CheckSplits checks the tuple form against the dataset's columns on a job
// of devices devices: one split list per column, one entry per dimension
// of that column, every entry at least 1, each list's product dividing the
// device count, every column cut the same number of ways along the batch
// (rows of different columns belong together), and every split dimension
// divisible. columns holds each column's shape with the batch first; a
// batch size of 0 is not checked (the batch is per device). Errors name
// the place as dataset_strategy[i][k].
func (d DatasetStrategy) CheckSplits(columns [][]int, names []string, devices int) error {
	if len(d.Splits) != len(columns) {
		return fmt.Errorf("%w: %d split lists for a dataset of %d columns (%v): give one per column, e.g. [[1, 1, 2, 1], [1]]", ErrDatasetStrategy, len(d.Splits), len(columns), names)
	}
	var errs []error
	for i, s := range d.Splits {
		shape := columns[i]
		if len(s) != len(shape) {
			errs = append(errs, fmt.Errorf("%w: dataset_strategy[%d] has %d entries %v, the %s column has %d dimensions", ErrDatasetStrategy, i, len(s), s, names[i], len(shape)))
			continue
		}
		used := 1
		for k, n := range s {
			switch {
			case n < 1:
				errs = append(errs, fmt.Errorf("%w: dataset_strategy[%d][%d] is %d, want at least 1", ErrDatasetStrategy, i, k, n))
			case shape[k] > 0 && shape[k]%n != 0:
				errs = append(errs, fmt.Errorf("%w: dataset_strategy[%d][%d] cuts dimension %d of the %s column (size %d) %d ways, which does not divide it", ErrDatasetStrategy, i, k, k, names[i], shape[k], n))
			}
			used *= max(n, 1)
		}
		if devices > 0 && devices%used != 0 {
			errs = append(errs, fmt.Errorf("%w: dataset_strategy[%d] %v uses %d devices, which does not divide the job's %d", ErrDatasetStrategy, i, s, used, devices))
		}
		if i > 0 && len(s) > 0 && len(d.Splits[0]) > 0 && s[0] != d.Splits[0][0] {
			errs = append(errs, fmt.Errorf("%w: dataset_strategy[%d][0] cuts the batch %d ways, dataset_strategy[0][0] %d ways: every column must cut the batch alike", ErrDatasetStrategy, i, s[0], d.Splits[0][0]))
		}
	}
	return errors.Join(errs...)
}

// CheckWith checks the strategy against full_batch as MindSpore does: the
// tuple form cannot be set while full_batch is true, and neither can the
// string "data_parallel", which means the opposite.
func (d DatasetStrategy) CheckWith(fullBatch bool) error {
	switch {
	case !fullBatch:
		return nil
	case d.Splits != nil:
		return fmt.Errorf("%w: a dataset_strategy tuple cannot be set while full_batch is true (full_batch is the dataset_strategy \"full_batch\")", ErrDatasetStrategy)
	case d.Name == DatasetDataParallel:
		return fmt.Errorf("%w: dataset_strategy %q contradicts full_batch: true", ErrDatasetStrategy, DatasetDataParallel)
	}
	return nil
}
