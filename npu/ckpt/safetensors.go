package ckpt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/userfile"
)

// The safetensors format (https://github.com/huggingface/safetensors): an
// 8-byte little-endian header length N, N bytes of JSON mapping each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the
// data that follows the header) plus an optional "__metadata__" object of
// strings, then the data. The tensors' byte ranges must tile the data
// exactly: no gaps, no overlaps, nothing after the last one.

// SafetensorsExt is the file name extension of a safetensors file.
const SafetensorsExt = ".safetensors"

// MaxSafetensorsHeader bounds the JSON header a reader accepts, as the
// reference implementation does (100 MB): a corrupt length cannot make a
// reader allocate the disk.
const MaxSafetensorsHeader = 100_000_000

// safetensorsAlign is the alignment of the data section: the header is
// padded with spaces to a multiple of it.
const safetensorsAlign = 8

const metadataKey = "__metadata__"

// safetensorsDTypes maps safetensors dtype names to MindSpore's.
var safetensorsDTypes = map[string]string{
	"BOOL": DTypeBool,
	"I8":   DTypeInt8, "I16": DTypeInt16, "I32": DTypeInt32, "I64": DTypeInt64,
	"U8": DTypeUInt8, "U16": DTypeUInt16, "U32": DTypeUInt32, "U64": DTypeUInt64,
	"F16": DTypeFloat16, "BF16": DTypeBFloat16, "F32": DTypeFloat32, "F64": DTypeFloat64,
}

// SafetensorsDType returns the safetensors name of a MindSpore dtype, and
// false for a dtype safetensors has no name for.
func SafetensorsDType(dtype string) (string, bool) {
	for st, ms := range safetensorsDTypes {
		if ms == dtype {
			return st, true
		}
	}
	return "", false
}

// SafetensorsFile is a decoded safetensors file.
type SafetensorsFile struct {
	Tensors  []Tensor          // in the header's order, with MindSpore dtype names
	Metadata map[string]string // the header's __metadata__; nil when absent
}

// ReadSafetensors loads the safetensors file at path. I/O errors are
// wrapped as they come from the os package; problems with the content are
// an *Error naming the file and, where it applies, the tensor.
func ReadSafetensors(path string) (*SafetensorsFile, error) {
	data, err := userfile.ReadFile(context.Background(), path, 0)
	if err != nil {
		return nil, fmt.Errorf("read safetensors %s: %w", path, err)
	}
	return DecodeSafetensors(path, data)
}

// safetensorsEntry is one tensor's header entry. Pointers tell a missing
// field from a zero one.
type safetensorsEntry struct {
	DType       *string   `json:"dtype"`
	Shape       *[]int64  `json:"shape"`
	DataOffsets *[2]int64 `json:"data_offsets"`
}

// DecodeSafetensors parses safetensors bytes; name is the file name used in
// errors. The returned tensors share memory with data.
func DecodeSafetensors(name string, data []byte) (*SafetensorsFile, error) {
	fail := func(tensor string, offset int64, format string, args ...any) (*SafetensorsFile, error) {
		return nil, &Error{File: name, Tensor: tensor, Value: -1, Offset: offset, Err: fmt.Errorf(format, args...)}
	}
	if len(data) < 8 {
		return fail("", 0, "safetensors: %d bytes, too short for the 8-byte header length: %w", len(data), ErrFormat)
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxSafetensorsHeader {
		return fail("", 0, "safetensors: header length %d is over the %d-byte limit: %w", n, MaxSafetensorsHeader, ErrFormat)
	}
	if n > uint64(len(data)-8) {
		return fail("", 0, "safetensors: header length %d runs past the end (%d bytes left; file truncated?): %w", n, len(data)-8, ErrFormat)
	}
	header, body := data[8:8+n], data[8+n:]
	// encoding/json would turn bytes that are not UTF-8 into U+FFFD, so a
	// name would silently become another one.
	if at := invalidUTF8(header); at >= 0 {
		return fail("", int64(8+at), "safetensors header: not valid UTF-8 at header byte %d (names and metadata must be UTF-8): %w", at, ErrFormat)
	}
	names, entries, meta, err := parseSafetensorsHeader(header)
	if err != nil {
		var te *tensorErr
		if errors.As(err, &te) {
			return fail(te.name, 8, "safetensors header: %w", te.err)
		}
		return fail("", 8, "safetensors header: %w", err)
	}
	base := int64(8 + n)
	type span struct {
		name       string
		begin, end int64
	}
	spans := make([]span, 0, len(names))
	tensors := make([]Tensor, 0, len(names))
	for _, tname := range names {
		e := entries[tname]
		dtype, ok := safetensorsDTypes[*e.DType]
		if !ok {
			return fail(tname, 8, "safetensors dtype %q: %w", clip(*e.DType), ErrDType)
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > int64(len(body)) {
			return fail(tname, base, "data_offsets [%d, %d] outside the %d data bytes (file truncated?): %w", begin, end, len(body), ErrFormat)
		}
		t := Tensor{Name: tname, Dims: *e.Shape, DType: dtype, Data: body[begin:end:end]}
		if len(t.Dims) == 0 {
			t.Dims = nil
		}
		want, err := byteSize(t.Dims, dtype)
		if err != nil {
			return fail(tname, 8, "shape %v: %w", t.Dims, err)
		}
		if want != end-begin {
			return fail(tname, base+begin, "data_offsets [%d, %d] hold %d bytes, shape %v of %s needs %d: %w", begin, end, end-begin, t.Dims, *e.DType, want, ErrShape)
		}
		spans = append(spans, span{tname, begin, end})
		tensors = append(tensors, t)
	}
	sort.SliceStable(spans, func(i, j int) bool {
		if spans[i].begin != spans[j].begin {
			return spans[i].begin < spans[j].begin
		}
		return spans[i].end < spans[j].end
	})
	var next int64
	for _, s := range spans {
		switch {
		case s.begin < next:
			return fail(s.name, base+s.begin, "data_offsets [%d, %d] overlap the previous tensor's (ending at %d): %w", s.begin, s.end, next, ErrFormat)
		case s.begin > next:
			return fail(s.name, base+next, "data_offsets [%d, %d] leave a gap of %d bytes before it: %w", s.begin, s.end, s.begin-next, ErrFormat)
		}
		next = s.end
	}
	if next != int64(len(body)) {
		return fail("", base+next, "%d bytes after the last tensor's data: %w", int64(len(body))-next, ErrFormat)
	}
	return &SafetensorsFile{Tensors: tensors, Metadata: meta}, nil
}

// tensorErr is a header problem inside one tensor's entry.
type tensorErr struct {
	name string
	err  error
}

func (e *tensorErr) Error() string { return fmt.Sprintf("tensor %q: %v", e.name, e.err) }

// invalidUTF8 returns the offset of the first byte of b that is not part
// of valid UTF-8, or -1.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// parseSafetensorsHeader decodes the JSON header keeping the entries'
// order, which is the order Read returns tensors in.
func parseSafetensorsHeader(header []byte) (names []string, entries map[string]safetensorsEntry, meta map[string]string, err error) {
	trimmed := bytes.TrimRight(header, " ")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, nil, nil, fmt.Errorf("not a JSON object: %w", ErrFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil {
		return nil, nil, nil, fmt.Errorf("%v: %w", err, ErrFormat)
	}
	entries = map[string]safetensorsEntry{}
	seenMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%v: %w", err, ErrFormat)
		}
		key := tok.(string) // object keys are always strings
		if key == metadataKey {
			if seenMeta {
				return nil, nil, nil, fmt.Errorf("%s given twice: %w", metadataKey, ErrFormat)
			}
			seenMeta = true
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, nil, fmt.Errorf("%s: want an object of strings: %v: %w", metadataKey, err, ErrFormat)
			}
			continue
		}
		if err := checkName(key); err != nil {
			return nil, nil, nil, err
		}
		if _, dup := entries[key]; dup {
			return nil, nil, nil, &tensorErr{key, fmt.Errorf("given twice: %w", ErrName)}
		}
		var e safetensorsEntry
		if err := dec.Decode(&e); err != nil {
			return nil, nil, nil, &tensorErr{key, fmt.Errorf("%v: %w", err, ErrFormat)}
		}
		switch {
		case e.DType == nil:
			return nil, nil, nil, &tensorErr{key, fmt.Errorf("missing dtype: %w", ErrFormat)}
		case e.Shape == nil:
			return nil, nil, nil, &tensorErr{key, fmt.Errorf("missing shape: %w", ErrFormat)}
		case e.DataOffsets == nil:
			return nil, nil, nil, &tensorErr{key, fmt.Errorf("missing data_offsets: %w", ErrFormat)}
		}
		entries[key] = e
		names = append(names, key)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, nil, fmt.Errorf("%v: %w", err, ErrFormat)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, nil, fmt.Errorf("data after the header object: %w", ErrFormat)
	}
	if len(names) == 0 {
		return nil, nil, nil, fmt.Errorf("no tensors: %w", ErrEmpty)
	}
	if len(meta) == 0 {
		meta = nil // {} and null say the same as no metadata
	}
	return names, entries, meta, nil
}

// WriteSafetensors atomically writes tensors to path in safetensors format,
// with metadata (may be nil) as the header's __metadata__.
func WriteSafetensors(path string, tensors []Tensor, metadata map[string]string) error {
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		return EncodeSafetensors(w, tensors, metadata)
	})
	if err != nil {
		return fmt.Errorf("write safetensors %s: %w", path, err)
	}
	return nil
}

// EncodeSafetensors writes tensors to w in safetensors format. The header
// lists them in the given order, which DecodeSafetensors keeps; the data is
// laid out widest dtype first so every tensor starts at a multiple of its
// element size (the data section itself starts 8-byte aligned).
func EncodeSafetensors(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	if len(tensors) == 0 {
		return fmt.Errorf("safetensors: %w", ErrEmpty)
	}
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		if err := t.Validate(); err != nil {
			return err
		}
		if t.Name == metadataKey {
			return fmt.Errorf("tensor %q: the name is reserved for metadata in safetensors: %w", t.Name, ErrName)
		}
		if _, ok := SafetensorsDType(t.DType); !ok {
			return fmt.Errorf("tensor %q: dtype %s has no safetensors name: %w", t.Name, t.DType, ErrDType)
		}
		if seen[t.Name] {
			return fmt.Errorf("tensor %q given twice: %w", t.Name, ErrName)
		}
		seen[t.Name] = true
	}
	order := make([]int, len(tensors))
	for i := range order {
		order[i] = i
	}
	elemSize := func(i int) int { s, _ := DTypeSize(tensors[i].DType); return s }
	slices.SortStableFunc(order, func(a, b int) int { return elemSize(b) - elemSize(a) })
	offsets := make([][2]int64, len(tensors))
	var off int64
	for _, i := range order {
		offsets[i] = [2]int64{off, off + int64(len(tensors[i].Data))}
		off += int64(len(tensors[i].Data))
	}

	var h strings.Builder
	h.WriteByte('{')
	if len(metadata) > 0 {
		meta, err := json.Marshal(metadata) // keys sorted
		if err != nil {
			return fmt.Errorf("safetensors metadata: %w", err)
		}
		fmt.Fprintf(&h, "%q:%s,", metadataKey, meta)
	}
	for i, t := range tensors {
		name, _ := json.Marshal(t.Name)
		dims := t.Dims
		if dims == nil {
			dims = []int64{}
		}
		shape, _ := json.Marshal(dims)
		st, _ := SafetensorsDType(t.DType)
		if i > 0 {
			h.WriteByte(',')
		}
		fmt.Fprintf(&h, `%s:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, name, st, shape, offsets[i][0], offsets[i][1])
	}
	h.WriteByte('}')
	if pad := (safetensorsAlign - (8+h.Len())%safetensorsAlign) % safetensorsAlign; pad > 0 {
		h.WriteString(strings.Repeat(" ", pad))
	}
	if h.Len() > MaxSafetensorsHeader {
		return fmt.Errorf("safetensors header of %d bytes is over the %d-byte limit readers accept (too many tensors)", h.Len(), MaxSafetensorsHeader)
	}
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(h.Len()))
	if _, err := w.Write(size[:]); err != nil {
		return err
	}
	if _, err := io.WriteString(w, h.String()); err != nil {
		return err
	}
	for _, i := range order {
		if _, err := w.Write(tensors[i].Data); err != nil {
			return fmt.Errorf("tensor %q: %w", tensors[i].Name, err)
		}
	}
	return nil
}

// ReadAny loads a checkpoint in either format, chosen by the file name: a
// path ending in .safetensors is read as safetensors, anything else as a
// MindSpore .ckpt.
func ReadAny(path string) ([]Tensor, error) {
	if strings.HasSuffix(strings.ToLower(path), SafetensorsExt) {
		f, err := ReadSafetensors(path)
		if err != nil {
			return nil, err
		}
		return f.Tensors, nil
	}
	return Read(path)
}
