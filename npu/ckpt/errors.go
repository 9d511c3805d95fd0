package ckpt

import (
	"errors"
	"fmt"
)

// Sentinel errors, matched with errors.Is. A decoding problem is returned as
// an *Error that wraps one of them.
var (
	// ErrFormat: the bytes are not a well-formed checkpoint protobuf
	// (truncated, corrupted, or fields MindSpore never writes).
	ErrFormat = errors.New("malformed checkpoint")
	// ErrCRC: the crc_num trailer does not match the content.
	ErrCRC = errors.New("crc32 mismatch")
	// ErrDigest: the sidecar digest file (DigestExt) does not match the
	// checkpoint, or is not a digest.
	ErrDigest = errors.New("sha256 digest mismatch")
	// ErrUnverified: ReadVerified found neither a crc_num trailer nor a
	// sidecar digest to prove the file whole.
	ErrUnverified = errors.New("checkpoint cannot be verified")
	// ErrDType: a tensor_type that is not one of MindSpore's numeric dtypes.
	ErrDType = errors.New("unknown dtype")
	// ErrShape: dims that are negative, overflow, or disagree with the data length.
	ErrShape = errors.New("bad shape")
	// ErrName: an empty, non-UTF-8 or duplicate tensor name.
	ErrName = errors.New("bad tensor name")
	// ErrUnsupported: a valid MindSpore entry this package does not handle
	// (map tensors of a MapParameter).
	ErrUnsupported = errors.New("unsupported entry")
	// ErrEmpty: a checkpoint without any tensor.
	ErrEmpty = errors.New("no tensors")
	// ErrNotFloat: a float accessor called on a non-float tensor.
	ErrNotFloat = errors.New("not a float tensor")
	// ErrNoCheckpoint: Latest found no checkpoint file.
	ErrNoCheckpoint = errors.New("no checkpoint found")
)

// Error is a problem found in a checkpoint file, with where it was found.
type Error struct {
	File   string // the file name given to Read or Decode
	Tensor string // the tensor tag, "" when the problem is outside one tensor
	Value  int    // index of the protobuf Value entry, -1 when not in one
	Offset int64  // byte offset of that entry or of the problem, -1 when unknown
	Err    error  // what is wrong; wraps one of the sentinel errors
}

func (e *Error) Error() string {
	msg := e.File + ": "
	switch {
	case e.Tensor != "" && e.Value >= 0:
		msg += fmt.Sprintf("tensor %q (value[%d] at byte %d): ", clip(e.Tensor), e.Value, e.Offset)
	case e.Tensor != "":
		msg += fmt.Sprintf("tensor %q: ", clip(e.Tensor))
	case e.Value >= 0:
		msg += fmt.Sprintf("value[%d] at byte %d: ", e.Value, e.Offset)
	case e.Offset >= 0:
		msg += fmt.Sprintf("byte %d: ", e.Offset)
	}
	return msg + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }
