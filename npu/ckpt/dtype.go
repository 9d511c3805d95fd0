package ckpt

import "sort"

// MindSpore's tensor_type names for the numeric dtypes this package reads and
// writes (str(mindspore.dtype) in Python).
const (
	DTypeBool     = "Bool"
	DTypeInt8     = "Int8"
	DTypeInt16    = "Int16"
	DTypeInt32    = "Int32"
	DTypeInt64    = "Int64"
	DTypeUInt8    = "UInt8"
	DTypeUInt16   = "UInt16"
	DTypeUInt32   = "UInt32"
	DTypeUInt64   = "UInt64"
	DTypeFloat16  = "Float16"
	DTypeBFloat16 = "BFloat16"
	DTypeFloat32  = "Float32"
	DTypeFloat64  = "Float64"
)

// DTypeSize returns the size in bytes of one element of dtype, and false for
// a name that is not a known dtype.
func DTypeSize(dtype string) (int, bool) {
	switch dtype {
	case DTypeBool, DTypeInt8, DTypeUInt8:
		return 1, true
	case DTypeInt16, DTypeUInt16, DTypeFloat16, DTypeBFloat16:
		return 2, true
	case DTypeInt32, DTypeUInt32, DTypeFloat32:
		return 4, true
	case DTypeInt64, DTypeUInt64, DTypeFloat64:
		return 8, true
	}
	return 0, false
}

// DTypes returns the known dtype names, sorted.
func DTypes() []string {
	names := []string{
		DTypeBool, DTypeInt8, DTypeInt16, DTypeInt32, DTypeInt64,
		DTypeUInt8, DTypeUInt16, DTypeUInt32, DTypeUInt64,
		DTypeFloat16, DTypeBFloat16, DTypeFloat32, DTypeFloat64,
	}
	sort.Strings(names)
	return names
}

// IsFloat reports whether dtype is a floating-point dtype.
func IsFloat(dtype string) bool {
	switch dtype {
	case DTypeFloat16, DTypeBFloat16, DTypeFloat32, DTypeFloat64:
		return true
	}
	return false
}
