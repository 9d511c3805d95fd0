// Package parallel provides MindSpore's parallel vocabulary for the NPU
// training core: the parallel mode (parsed once, where a spec's `with` block
// is decoded), tensor layouts as a device matrix plus a tensor map, and
// per-operator shard strategies.
//
// # Layouts
//
// A [Layout] follows MindSpore's strategy files. The device matrix arranges
// the devices of a job in a grid; a rank's coordinate in it is row-major
// (the last axis varies fastest). Entry k of the tensor map says how
// dimension k of the tensor is split: -1 means not split, m >= 0 means split
// along the device matrix axis len(dev_matrix)-1-m, that is, counting axes
// from the right. Every rank holds one equal-sized slice; ranks whose
// coordinates differ only on axes no dimension maps to hold the same slice
// (repeated calculation).
//
//	l := parallel.Layout{DeviceMatrix: []int{2, 4}, TensorMap: []int{1, -1}, Shape: []int{8, 3}}
//	box, _ := l.Box(5) // rank 5 = coordinate (1, 1): rows 4-7, all columns
//
// # Invariants
//
// Splits are even: a dimension split n ways must be divisible by n, as
// MindSpore requires of semi_auto_parallel strategies; [Layout.Validate] and
// [Strategy.Check] refuse anything else with an error naming the dimension.
package parallel
