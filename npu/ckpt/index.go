package ckpt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// Index is the layout of a checkpoint file: every tensor's name, shape,
// dtype and the byte ranges its data occupies, found by walking the
// protobuf framing without reading any tensor data. It lets a caller read
// just the part of a tensor it needs with ReadAt.
type Index struct {
	File    string          // the name given to IndexReader, used in errors
	Size    int64           // file size in bytes
	CRC     bool            // a crc_num trailer is present (verify it with CheckCRC)
	Tensors []IndexedTensor // in file order, slices joined
}

// IndexedTensor is one tensor of an Index.
type IndexedTensor struct {
	Name  string
	Dims  []int64 // whole tensor shape; empty for a scalar
	DType string
	Bytes int64 // data size; the Pieces' lengths add up to it
	// Pieces are the file ranges holding the row-major data, in order: one
	// per protobuf Value, more than one when the writer sliced the tensor.
	Pieces []ByteRange
}

// ByteRange is a run of bytes in a file.
type ByteRange struct {
	Offset, Length int64
}

// Lookup returns the tensor called name.
func (x *Index) Lookup(name string) (*IndexedTensor, bool) {
	for i := range x.Tensors {
		if x.Tensors[i].Name == name {
			return &x.Tensors[i], true
		}
	}
	return nil, false
}

// maxFieldBytes bounds the non-data fields (tag, dtype name, packed dims) an
// index reads into memory, so a corrupted length cannot make it allocate
// gigabytes; MindSpore's longest parameter names are a few hundred bytes.
const maxFieldBytes = 1 << 20

// IndexReader indexes the checkpoint held by r (size bytes; name is used in
// errors). It applies the checks Decode applies to everything but the data
// itself: known dtypes, consistent dims and lengths, unique valid names. A
// crc_num trailer is recognised but not verified, as that needs every byte;
// see CheckCRC.
func IndexReader(name string, r io.ReaderAt, size int64) (*Index, error) {
	fail := func(offset int64, err error) (*Index, error) {
		return nil, &Error{File: name, Value: -1, Offset: offset, Err: err}
	}
	if size <= 0 {
		return fail(-1, fmt.Errorf("empty file: %w", ErrEmpty))
	}
	end := size
	hasCRC, err := hasTrailer(r, size)
	if err != nil {
		return fail(-1, fmt.Errorf("read trailer: %w", err))
	}
	if hasCRC {
		end -= int64(crcTrailerLen)
	}
	sc := &indexScanner{name: name, r: r}
	var values []indexedValue
	for off := int64(0); off < end; {
		v, next, err := sc.value(off, end, len(values))
		if err != nil {
			return nil, err
		}
		values = append(values, v)
		off = next
	}
	if len(values) == 0 {
		return fail(-1, fmt.Errorf("checkpoint holds no values: %w", ErrEmpty))
	}
	tensors, err := joinIndexedValues(name, values)
	if err != nil {
		return nil, err
	}
	return &Index{File: name, Size: size, CRC: hasCRC, Tensors: tensors}, nil
}

// hasTrailer reports whether the file ends in a crc_num trailer, recognised
// as checkCRC does.
func hasTrailer(r io.ReaderAt, size int64) (bool, error) {
	if size < int64(crcTrailerLen) {
		return false, nil
	}
	var tail [crcTrailerLen]byte
	if _, err := r.ReadAt(tail[:], size-int64(crcTrailerLen)); err != nil {
		return false, err
	}
	return string(tail[:len(crcMagic)]) == crcMagic, nil
}

// CheckCRC reads the whole checkpoint in r and verifies its crc_num
// trailer; a file without a trailer passes. The error is an *Error wrapping
// ErrCRC when the content does not match.
func CheckCRC(name string, r io.ReaderAt, size int64) error {
	_, _, err := ContentCRC(name, r, size)
	return err
}

// ContentCRC reads the whole checkpoint in r and returns the CRC-32 (IEEE)
// of its content, every byte but a crc_num trailer, and whether a trailer
// is there; a trailer that disagrees is an *Error wrapping ErrCRC. It lets
// a manifest prove a file written with or without the trailer alike.
func ContentCRC(name string, r io.ReaderAt, size int64) (sum uint32, trailer bool, err error) {
	has, err := hasTrailer(r, size)
	if err != nil {
		return 0, false, &Error{File: name, Value: -1, Offset: -1, Err: fmt.Errorf("read trailer: %w", err)}
	}
	payload := size
	if has {
		payload -= int64(crcTrailerLen)
	}
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, payload)); err != nil {
		return 0, has, &Error{File: name, Value: -1, Offset: -1, Err: fmt.Errorf("read for crc: %w", err)}
	}
	got := h.Sum32()
	if !has {
		return got, false, nil
	}
	var stored [crcValueLen]byte
	if _, err := r.ReadAt(stored[:], size-int64(crcValueLen)); err != nil {
		return 0, true, &Error{File: name, Value: -1, Offset: -1, Err: fmt.Errorf("read trailer: %w", err)}
	}
	for _, b := range stored[:crcValueLen-4] {
		if b != 0 {
			return 0, true, &Error{File: name, Value: -1, Offset: payload, Err: fmt.Errorf("crc_num trailer %x does not fit 32 bits: %w", stored, ErrCRC)}
		}
	}
	if want := binary.BigEndian.Uint32(stored[crcValueLen-4:]); want != got {
		return 0, true, &Error{File: name, Value: -1, Offset: payload, Err: fmt.Errorf("%w: trailer says %08x, content has %08x (file damaged)", ErrCRC, want, got)}
	}
	return got, true, nil
}

// ReadAt reads the tensor's data bytes [off, off+len(p)) from r, the file
// the tensor was indexed from, crossing piece boundaries as needed.
func (t *IndexedTensor) ReadAt(r io.ReaderAt, p []byte, off int64) error {
	if off < 0 || off+int64(len(p)) > t.Bytes {
		return fmt.Errorf("tensor %q: read of %d bytes at %d is outside its %d bytes", t.Name, len(p), off, t.Bytes)
	}
	for _, piece := range t.Pieces {
		if len(p) == 0 {
			return nil
		}
		if off >= piece.Length {
			off -= piece.Length
			continue
		}
		n := min(int64(len(p)), piece.Length-off)
		if _, err := r.ReadAt(p[:n], piece.Offset+off); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("tensor %q: read data: %w", t.Name, err)
		}
		p, off = p[n:], 0
	}
	return nil
}

// indexedValue is one protobuf Value: its header facts and where its
// tensor_content lies in the file.
type indexedValue = value[ByteRange]

// indexScanner reads protobuf framing through a small window, so indexing a
// file costs a few reads per Value whatever the tensors' sizes.
type indexScanner struct {
	name     string
	r        io.ReaderAt
	win      []byte
	winStart int64
}

const indexWindow = 4096

// peek returns up to n bytes at off, fewer only when limit comes first.
func (s *indexScanner) peek(off, limit int64, n int) ([]byte, error) {
	n = int(min(int64(n), limit-off))
	if off >= s.winStart && off+int64(n) <= s.winStart+int64(len(s.win)) {
		return s.win[off-s.winStart : off-s.winStart+int64(n)], nil
	}
	size := int(min(int64(max(n, indexWindow)), limit-off))
	if cap(s.win) < size {
		s.win = make([]byte, size)
	}
	s.win = s.win[:size]
	got, err := s.r.ReadAt(s.win, off)
	if got < size {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		s.win = s.win[:0]
		return nil, err
	}
	s.winStart = off
	return s.win[:n], nil
}

// field reads a field key and, for a length-delimited field, its length;
// it returns the offset of the field's body.
func (s *indexScanner) field(off, limit int64) (num protowire.Number, typ protowire.Type, length uint64, body int64, err error) {
	b, err := s.peek(off, limit, 2*binary.MaxVarintLen64)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, 0, 0, fmt.Errorf("field key: %v: %w", protowire.ParseError(n), ErrFormat)
	}
	body = off + int64(n)
	switch typ {
	case protowire.BytesType:
		l, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return 0, 0, 0, 0, fmt.Errorf("field %d length: %v: %w", num, protowire.ParseError(m), ErrFormat)
		}
		body += int64(m)
		if l > uint64(limit-body) {
			return 0, 0, 0, 0, fmt.Errorf("field %d: length %d runs past the end (%d bytes left; file truncated?): %w", num, l, limit-body, ErrFormat)
		}
		return num, typ, l, body, nil
	case protowire.VarintType:
		v, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return 0, 0, 0, 0, fmt.Errorf("field %d: %v: %w", num, protowire.ParseError(m), ErrFormat)
		}
		return num, typ, v, body + int64(m), nil
	}
	return num, typ, 0, body, fmt.Errorf("unexpected field %d (wire type %d): %w", num, typ, ErrFormat)
}

// small reads a length-delimited field body that is not tensor data.
func (s *indexScanner) small(off int64, length uint64, what string) ([]byte, error) {
	if length > maxFieldBytes {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d this reader accepts: %w", what, length, maxFieldBytes, ErrFormat)
	}
	b := make([]byte, length)
	if _, err := s.r.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return b, nil
}

// value indexes the Checkpoint.Value whose key is at off.
func (s *indexScanner) value(off, end int64, index int) (indexedValue, int64, error) {
	v := indexedValue{index: index, offset: off}
	fail := func(err error) (indexedValue, int64, error) {
		return indexedValue{}, 0, &Error{File: s.name, Tensor: v.tag, Value: index, Offset: off, Err: err}
	}
	num, typ, length, body, err := s.field(off, end)
	if err != nil {
		if b, perr := s.peek(off, end, indexWindow); perr == nil {
			if _, _, n := protowire.ConsumeTag(b); n > 0 {
				v.tag = peekTag(b[n:]) // name what a truncated file lost
			}
		}
		return fail(fmt.Errorf("value: %w", err))
	}
	if num != fieldCheckpointValue || typ != protowire.BytesType {
		return indexedValue{}, 0, &Error{File: s.name, Value: -1, Offset: off, Err: fmt.Errorf("unexpected field %d (wire type %d) in Checkpoint: %w", num, typ, ErrFormat)}
	}
	valueEnd := body + int64(length)
	var haveTag, haveTensor bool
	for pos := body; pos < valueEnd; {
		num, typ, length, fbody, err := s.field(pos, valueEnd)
		if err != nil {
			return fail(fmt.Errorf("value: %w", err))
		}
		switch {
		case num == fieldValueTag && typ == protowire.BytesType:
			if haveTag {
				return fail(fmt.Errorf("tag given twice: %w", ErrFormat))
			}
			b, err := s.small(fbody, length, "tag")
			if err != nil {
				return fail(err)
			}
			haveTag, v.tag = true, string(b)
			if err := checkName(v.tag); err != nil {
				v.tag = ""
				return fail(err)
			}
		case num == fieldValueTensor && typ == protowire.BytesType:
			if haveTensor {
				return fail(fmt.Errorf("tensor given twice: %w", ErrFormat))
			}
			haveTensor = true
			if err := s.tensor(&v, fbody, fbody+int64(length)); err != nil {
				return fail(err)
			}
		case num == fieldValueMapTensor && typ == protowire.BytesType:
			return fail(fmt.Errorf("map tensor (MapParameter) values are not supported: %w", ErrUnsupported))
		default:
			return fail(fmt.Errorf("unexpected field %d (wire type %d) in Value: %w", num, typ, ErrFormat))
		}
		pos = fbody
		if typ == protowire.BytesType {
			pos += int64(length)
		}
	}
	switch {
	case !haveTag:
		return fail(fmt.Errorf("missing tag: %w", ErrFormat))
	case !haveTensor:
		return fail(fmt.Errorf("missing tensor: %w", ErrFormat))
	}
	return v, valueEnd, nil
}

// tensor indexes a TensorProto occupying [start, end).
func (s *indexScanner) tensor(v *indexedValue, start, end int64) error {
	var haveType, haveContent bool
	for pos := start; pos < end; {
		num, typ, length, body, err := s.field(pos, end)
		if err != nil {
			return fmt.Errorf("tensor: %w", err)
		}
		next := body
		if typ == protowire.BytesType {
			next += int64(length)
		}
		switch {
		case num == fieldTensorDims && typ == protowire.VarintType:
			v.dims = append(v.dims, int64(length))
		case num == fieldTensorDims && typ == protowire.BytesType:
			b, err := s.small(body, length, "packed dims")
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
		case num == fieldTensorType && typ == protowire.BytesType:
			if haveType {
				return fmt.Errorf("tensor_type given twice: %w", ErrFormat)
			}
			b, err := s.small(body, length, "tensor_type")
			if err != nil {
				return err
			}
			haveType, v.dtype = true, string(b)
		case num == fieldTensorContent && typ == protowire.BytesType:
			if haveContent {
				return fmt.Errorf("tensor_content given twice: %w", ErrFormat)
			}
			haveContent, v.content = true, ByteRange{Offset: body, Length: int64(length)}
		default:
			return fmt.Errorf("unexpected field %d (wire type %d) in TensorProto: %w", num, typ, ErrFormat)
		}
		pos = next
	}
	return checkTensorHeader(haveType, haveContent, v.dtype, v.dims)
}

// joinIndexedValues joins runs of consecutive Values with the same tag into
// one tensor each, with the shape rules of Decode.
func joinIndexedValues(name string, values []indexedValue) ([]IndexedTensor, error) {
	return joinValues(name, values, func(v indexedValue) int64 { return v.content.Length },
		func(run []indexedValue, dims []int64, total int64) IndexedTensor {
			t := IndexedTensor{Name: run[0].tag, DType: run[0].dtype, Dims: dims, Bytes: total, Pieces: make([]ByteRange, 0, len(run))}
			for _, v := range run {
				t.Pieces = append(t.Pieces, v.content)
			}
			return t
		})
}
