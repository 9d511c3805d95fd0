package ckpt

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mspipe/mspipe/internal/userfile"
)

// Field numbers of checkpoint.proto.
const (
	fieldCheckpointValue = 1 // Checkpoint.value
	fieldValueTag        = 1 // Checkpoint.Value.tag
	fieldValueTensor     = 2 // Checkpoint.Value.tensor
	fieldValueMapTensor  = 3 // Checkpoint.Value.maptensor
	fieldTensorDims      = 1 // TensorProto.dims
	fieldTensorType      = 2 // TensorProto.tensor_type
	fieldTensorContent   = 3 // TensorProto.tensor_content
)

// File is a decoded checkpoint with what Read learned about its layout.
type File struct {
	Tensors []Tensor // in file order, slices merged
	Values  int      // protobuf Value entries; more than len(Tensors) when tensors were sliced
	CRC     bool     // a crc_num trailer was present (and matched)
	Digest  bool     // ReadFile found a sidecar digest (DigestExt) and it matched
}

// Read loads the tensors of the checkpoint at path, in file order.
func Read(path string) ([]Tensor, error) {
	f, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return f.Tensors, nil
}

// ReadFile loads the checkpoint at path with its layout facts. When a
// sidecar digest (DigestExt) lies beside the file, the file must match it.
// I/O errors are returned wrapped as they come from the os package; problems
// with the content are an *Error.
func ReadFile(path string) (*File, error) {
	// A regular file only: /dev/zero or a FIFO would be read without end.
	// Decoding then never allocates more than the file's length.
	data, err := userfile.ReadFile(context.Background(), path, 0)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	hasDigest, err := checkDigest(path, data)
	if err != nil {
		return nil, err
	}
	f, err := DecodeFile(path, data)
	if err != nil {
		return nil, err
	}
	f.Digest = hasDigest
	return f, nil
}

// Decode parses checkpoint bytes; name is the file name used in errors. The
// returned tensors may share memory with data.
func Decode(name string, data []byte) ([]Tensor, error) {
	f, err := DecodeFile(name, data)
	if err != nil {
		return nil, err
	}
	return f.Tensors, nil
}

// DecodeFile is Decode that also reports the file's layout.
func DecodeFile(name string, data []byte) (*File, error) {
	fail := func(offset int64, err error) (*File, error) {
		return nil, &Error{File: name, Value: -1, Offset: offset, Err: err}
	}
	if len(data) == 0 {
		return fail(-1, fmt.Errorf("empty file: %w", ErrEmpty))
	}
	payload, hasCRC, err := checkCRC(data)
	if err != nil {
		return fail(int64(len(data)-crcTrailerLen), err)
	}
	values, err := parseValues(name, payload)
	if err != nil {
		return nil, err
	}
	if len(values) == 0 {
		return fail(-1, fmt.Errorf("checkpoint holds no values: %w", ErrEmpty))
	}
	tensors, err := mergeValues(name, values)
	if err != nil {
		return nil, err
	}
	return &File{Tensors: tensors, Values: len(values), CRC: hasCRC}, nil
}

// checkCRC strips and verifies a crc_num trailer, recognised as MindSpore's
// load_checkpoint does: by "crc_num" at 17 bytes from the end.
func checkCRC(data []byte) (payload []byte, found bool, err error) {
	if len(data) < crcTrailerLen || string(data[len(data)-crcTrailerLen:len(data)-crcValueLen]) != crcMagic {
		return data, false, nil
	}
	payload = data[:len(data)-crcTrailerLen]
	stored := data[len(data)-crcValueLen:]
	for _, b := range stored[:crcValueLen-4] {
		if b != 0 {
			return nil, true, fmt.Errorf("crc_num trailer %x does not fit 32 bits: %w", stored, ErrCRC)
		}
	}
	want := binary.BigEndian.Uint32(stored[crcValueLen-4:])
	if got := crc32.ChecksumIEEE(payload); got != want {
		return nil, true, fmt.Errorf("%w: trailer says %08x, content has %08x (file damaged)", ErrCRC, want, got)
	}
	return payload, true, nil
}

// rawValue is one Checkpoint.Value as found in the file, its data aliasing
// the file's bytes.
type rawValue = value[[]byte]

// parseValues walks the Checkpoint message field by field so that errors can
// name the entry and its byte offset, and so tensor_content aliases data
// instead of being copied. It is stricter than protobuf: fields MindSpore
// never writes, repeated singular fields and map tensors are errors.
func parseValues(name string, data []byte) ([]rawValue, error) {
	var values []rawValue
	for off := 0; off < len(data); {
		num, typ, n := protowire.ConsumeTag(data[off:])
		if n < 0 {
			return nil, &Error{File: name, Value: -1, Offset: int64(off), Err: fmt.Errorf("checkpoint field key: %v: %w", protowire.ParseError(n), ErrFormat)}
		}
		if num != fieldCheckpointValue || typ != protowire.BytesType {
			return nil, &Error{File: name, Value: -1, Offset: int64(off), Err: fmt.Errorf("unexpected field %d (wire type %d) in Checkpoint: %w", num, typ, ErrFormat)}
		}
		v := rawValue{index: len(values), offset: int64(off)}
		body, m, err := consumeBytes(data[off+n:], "value")
		if err != nil {
			return nil, &Error{File: name, Tensor: peekTag(data[off+n:]), Value: v.index, Offset: v.offset, Err: err}
		}
		if err := parseValue(&v, body); err != nil {
			return nil, &Error{File: name, Tensor: v.tag, Value: v.index, Offset: v.offset, Err: err}
		}
		values = append(values, v)
		off += n + m
	}
	return values, nil
}

// peekTag returns the tag at the start of a Value whose declared length
// runs past the end, to name the tensor a truncated file lost; "" if the
// tag itself is not intact.
func peekTag(b []byte) string {
	_, k := protowire.ConsumeVarint(b)
	if k < 0 {
		return ""
	}
	num, typ, n := protowire.ConsumeTag(b[k:])
	if n < 0 || num != fieldValueTag || typ != protowire.BytesType {
		return ""
	}
	tag, m := protowire.ConsumeBytes(b[k+n:])
	if m < 0 || checkName(string(tag)) != nil {
		return ""
	}
	return string(tag)
}

// consumeBytes reads a length-delimited field body, saying how a bad length
// is bad: a declared length past the end is what truncation looks like.
func consumeBytes(b []byte, what string) ([]byte, int, error) {
	body, n := protowire.ConsumeBytes(b)
	if n >= 0 {
		return body, n, nil
	}
	if size, k := protowire.ConsumeVarint(b); k > 0 {
		return nil, 0, fmt.Errorf("%s: length %d runs past the end (%d bytes left; file truncated?): %w", what, size, len(b)-k, ErrFormat)
	}
	return nil, 0, fmt.Errorf("%s length: %v: %w", what, protowire.ParseError(n), ErrFormat)
}

func parseValue(v *rawValue, body []byte) error {
	var tensor []byte
	var haveTag, haveTensor bool
	for off := 0; off < len(body); {
		num, typ, n := protowire.ConsumeTag(body[off:])
		if n < 0 {
			return fmt.Errorf("value field key: %v: %w", protowire.ParseError(n), ErrFormat)
		}
		off += n
		switch {
		case num == fieldValueTag && typ == protowire.BytesType:
			b, m, err := consumeBytes(body[off:], "tag")
			if err != nil {
				return err
			}
			if haveTag {
				return fmt.Errorf("tag given twice: %w", ErrFormat)
			}
			haveTag, v.tag = true, string(b)
			off += m
		case num == fieldValueTensor && typ == protowire.BytesType:
			b, m, err := consumeBytes(body[off:], "tensor")
			if err != nil {
				return err
			}
			if haveTensor {
				return fmt.Errorf("tensor given twice: %w", ErrFormat)
			}
			haveTensor, tensor = true, b
			off += m
		case num == fieldValueMapTensor && typ == protowire.BytesType:
			return fmt.Errorf("map tensor (MapParameter) values are not supported: %w", ErrUnsupported)
		default:
			return fmt.Errorf("unexpected field %d (wire type %d) in Value: %w", num, typ, ErrFormat)
		}
	}
	if !haveTag {
		return fmt.Errorf("missing tag: %w", ErrFormat)
	}
	if err := checkName(v.tag); err != nil {
		v.tag = "" // do not repeat a bad name as the error's location
		return err
	}
	if !haveTensor {
		return fmt.Errorf("missing tensor: %w", ErrFormat)
	}
	return parseTensor(v, tensor)
}

func parseTensor(v *rawValue, body []byte) error {
	var haveType, haveContent bool
	for off := 0; off < len(body); {
		num, typ, n := protowire.ConsumeTag(body[off:])
		if n < 0 {
			return fmt.Errorf("tensor field key: %v: %w", protowire.ParseError(n), ErrFormat)
		}
		off += n
		switch {
		case num == fieldTensorDims && typ == protowire.VarintType: // proto2 default: one varint per dim
			d, m := protowire.ConsumeVarint(body[off:])
			if m < 0 {
				return fmt.Errorf("dims: %v: %w", protowire.ParseError(m), ErrFormat)
			}
			v.dims = append(v.dims, int64(d))
			off += m
		case num == fieldTensorDims && typ == protowire.BytesType: // packed encoding, also valid protobuf
			b, m, err := consumeBytes(body[off:], "dims")
			if err != nil {
				return err
			}
			for len(b) > 0 {
				d, k := protowire.ConsumeVarint(b)
				if k < 0 {
					return fmt.Errorf("packed dims: %v: %w", protowire.ParseError(k), ErrFormat)
				}
				v.dims = append(v.dims, int64(d))
				b = b[k:]
			}
			off += m
		case num == fieldTensorType && typ == protowire.BytesType:
			b, m, err := consumeBytes(body[off:], "tensor_type")
			if err != nil {
				return err
			}
			if haveType {
				return fmt.Errorf("tensor_type given twice: %w", ErrFormat)
			}
			haveType, v.dtype = true, string(b)
			off += m
		case num == fieldTensorContent && typ == protowire.BytesType:
			b, m, err := consumeBytes(body[off:], "tensor_content")
			if err != nil {
				return err
			}
			if haveContent {
				return fmt.Errorf("tensor_content given twice: %w", ErrFormat)
			}
			haveContent, v.content = true, b
			off += m
		default:
			return fmt.Errorf("unexpected field %d (wire type %d) in TensorProto: %w", num, typ, ErrFormat)
		}
	}
	return checkTensorHeader(haveType, haveContent, v.dtype, v.dims)
}

// mergeValues joins runs of consecutive Values with the same tag into one
// tensor each, keeping file order.
func mergeValues(name string, values []rawValue) ([]Tensor, error) {
	return joinValues(name, values, func(v rawValue) int64 { return int64(len(v.content)) },
		func(run []rawValue, dims []int64, total int64) Tensor {
			data := run[0].content
			if len(run) > 1 {
				data = make([]byte, 0, total)
				for _, v := range run {
					data = append(data, v.content...)
				}
			}
			return Tensor{Name: run[0].tag, Dims: dims, DType: run[0].dtype, Data: data}
		})
}

// wholeDims checks total data bytes against dims that describe the whole
// tensor and returns the tensor's dims, mapping MindSpore's scalar marker
// [0] with one element to the empty shape.
func wholeDims(dims []int64, dtype string, total int64, slices int) ([]int64, error) {
	size, _ := DTypeSize(dtype)
	if len(dims) == 1 && dims[0] == 0 && total == int64(size) {
		return []int64{}, nil
	}
	want, err := byteSize(dims, dtype)
	if err != nil {
		return nil, err
	}
	if total != want {
		if slices > 1 {
			return nil, fmt.Errorf("%d slices hold %d bytes, want %d for %s %v: %w", slices, total, want, dtype, dims, ErrShape)
		}
		return nil, fmt.Errorf("data is %d bytes, want %d for %s %v: %w", total, want, dtype, dims, ErrShape)
	}
	return append([]int64{}, dims...), nil
}

// checkTensorHeader checks what a TensorProto must hold once its fields
// are read, for Decode and Index alike: a type and content, a supported
// dtype, and no negative dim.
func checkTensorHeader(haveType, haveContent bool, dtype string, dims []int64) error {
	switch {
	case !haveType:
		return fmt.Errorf("missing tensor_type: %w", ErrFormat)
	case !haveContent:
		return fmt.Errorf("missing tensor_content: %w", ErrFormat)
	case dtype == "str":
		return fmt.Errorf("string value (tensor_type \"str\", from append_info) is not supported: %w", ErrUnsupported)
	}
	if _, ok := DTypeSize(dtype); !ok {
		return fmt.Errorf("%w %q", ErrDType, clip(dtype))
	}
	for _, d := range dims {
		if d < 0 {
			return fmt.Errorf("negative dim in %v: %w", dims, ErrShape)
		}
	}
	return nil
}
