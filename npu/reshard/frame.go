package reshard

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/mspipe/mspipe/npu/ckpt"
)

// Field numbers of checkpoint.proto (see npu/ckpt/proto).
const (
	fieldCheckpointValue = 1
	fieldValueTag        = 1
	fieldValueTensor     = 2
	fieldTensorDims      = 1
	fieldTensorType      = 2
	fieldTensorContent   = 3
)

// crcMagic starts MindSpore's crc_num trailer; the CRC-32 follows as a
// 10-byte big-endian integer.
const (
	crcMagic      = "crc_num"
	crcTrailerLen = len(crcMagic) + 10
)

// appendValueHeader appends the bytes ckpt.Encode writes before a piece of
// contentLen data bytes of tensor name: the Checkpoint.value key and
// length, the tag, the tensor key and length, the dims (unpacked, proto2),
// the dtype and the tensor_content key and length. dims are the whole
// tensor's, [0] for a scalar.
func appendValueHeader(b []byte, name string, dims []int64, dtype string, contentLen int64) []byte {
	tensorLen := 0
	for _, d := range dims {
		tensorLen += protowire.SizeTag(fieldTensorDims) + protowire.SizeVarint(uint64(d))
	}
	tensorLen += protowire.SizeTag(fieldTensorType) + protowire.SizeBytes(len(dtype))
	tensorLen += protowire.SizeTag(fieldTensorContent) + protowire.SizeVarint(uint64(contentLen)) + int(contentLen)
	valueLen := protowire.SizeTag(fieldValueTag) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(fieldValueTensor) + protowire.SizeBytes(tensorLen)

	b = protowire.AppendTag(b, fieldCheckpointValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(valueLen))
	b = protowire.AppendTag(b, fieldValueTag, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, fieldValueTensor, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(tensorLen))
	for _, d := range dims {
		b = protowire.AppendTag(b, fieldTensorDims, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d))
	}
	b = protowire.AppendTag(b, fieldTensorType, protowire.BytesType)
	b = protowire.AppendString(b, dtype)
	b = protowire.AppendTag(b, fieldTensorContent, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(contentLen))
}

// pieceSizes splits a tensor's data bytes as ckpt.Encode does: one piece
// up to limit, else ceil(bytes/limit) pieces with numpy.array_split's
// element counts.
func pieceSizes(total int64, elem int, limit int64) []int64 {
	if total <= limit {
		return []int64{total}
	}
	k := (total + limit - 1) / limit
	n := total / int64(elem)
	base, extra := n/k, n%k
	sizes := make([]int64, k)
	for i := range sizes {
		cnt := base
		if int64(i) < extra {
			cnt++
		}
		sizes[i] = cnt * int64(elem)
	}
	return sizes
}

// fileDims is how a checkpoint records a shape: [0] for a scalar.
func fileDims(shape []int) []int64 {
	if len(shape) == 0 {
		return []int64{0}
	}
	dims := make([]int64, len(shape))
	for i, d := range shape {
		dims[i] = int64(d)
	}
	return dims
}

// encodedSize is the size of a tensor's Values as ckpt.Encode writes them.
func encodedSize(name string, shape []int, dtype string, bytes int64, limit int64) int64 {
	elem, _ := ckpt.DTypeSize(dtype)
	var total int64
	var hdr []byte
	for _, p := range pieceSizes(bytes, elem, limit) {
		hdr = appendValueHeader(hdr[:0], name, fileDims(shape), dtype, p)
		total += int64(len(hdr)) + p
	}
	return total
}

// newTensorHash starts the content hash ckpt.Tensor.Hash computes for a
// tensor of this dtype and shape; the caller writes the row-major data.
func newTensorHash(dtype string, shape []int) hash.Hash {
	h := sha256.New()
	h.Write([]byte(dtype))
	h.Write([]byte{0})
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(len(shape)))
	h.Write(buf[:])
	for _, d := range shape {
		binary.LittleEndian.PutUint64(buf[:], uint64(d))
		h.Write(buf[:])
	}
	return h
}

// outFile is one output checkpoint being written: a temp file next to its
// final name, framed tensor by tensor, with a running CRC for the trailer.
type outFile struct {
	path    string // final path
	f       *os.File
	behind  *writeBehind
	written *atomic.Int64 // bytes emitted by every output file of the run
	w       *bufio.Writer
	crc     hash.Hash32
	hdr     []byte

	// The tensor being written.
	name   string
	dims   []int64
	dtype  string
	pieces []int64 // sizes of the pieces still to start
	left   int64   // bytes left in the current piece
}

func createOut(path string, bufSize int, written *atomic.Int64) (*outFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create output %s: %w", path, err)
	}
	wb := newWriteBehind(f)
	return &outFile{path: path, f: f, behind: wb, w: bufio.NewWriterSize(wb, bufSize), crc: crc32.NewIEEE(), written: written}, nil
}

// writeBehindBytes is how much of a file is written before the disk is
// asked to start writing it.
const writeBehindBytes = 8 << 20

// writeBehind writes to f and, every writeBehindBytes, has the disk start
// writing what it holds so far: the disk then works while the run streams
// instead of all at the final fsync. The request is made by a goroutine of
// its own, as it can block while the disk's queue is full.
type writeBehind struct {
	f           *os.File
	off, kicked int64
	kick        chan int64 // write out up to this offset
	done        chan struct{}
	stopOnce    sync.Once
}

func newWriteBehind(f *os.File) *writeBehind {
	w := &writeBehind{f: f, kick: make(chan int64, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var from int64
		for to := range w.kick {
			startWriteback(f, from, to-from)
			from = to
		}
	}()
	return w
}

func (w *writeBehind) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.kicked >= writeBehindBytes {
		select {
		case w.kick <- w.off:
			w.kicked = w.off
		default: // still busy: the next request covers this range too
		}
	}
	return n, err
}

// stop ends the goroutine and waits for it, before the file is synced or
// closed.
func (w *writeBehind) stop() {
	w.stopOnce.Do(func() { close(w.kick) })
	<-w.done
}

func (o *outFile) emit(p []byte) error {
	o.crc.Write(p)
	if _, err := o.w.Write(p); err != nil {
		return fmt.Errorf("write %s: tensor %q: %w", o.path, o.name, err)
	}
	o.written.Add(int64(len(p)))
	return nil
}

// begin starts a tensor of the given shape and data size.
func (o *outFile) begin(name string, shape []int, dtype string, bytes, limit int64) error {
	elem, _ := ckpt.DTypeSize(dtype)
	o.name, o.dims, o.dtype = name, fileDims(shape), dtype
	o.pieces = pieceSizes(bytes, elem, limit)
	return o.nextPiece()
}

func (o *outFile) nextPiece() error {
	size := o.pieces[0]
	o.pieces = o.pieces[1:]
	o.hdr = appendValueHeader(o.hdr[:0], o.name, o.dims, o.dtype, size)
	o.left = size
	return o.emit(o.hdr)
}

// write appends data bytes of the current tensor, starting a new Value
// where the slice limit says.
func (o *outFile) write(p []byte) error {
	for len(p) > 0 {
		if o.left == 0 {
			if len(o.pieces) == 0 {
				return fmt.Errorf("write %s: tensor %q: more data than its shape holds", o.path, o.name)
			}
			if err := o.nextPiece(); err != nil {
				return err
			}
		}
		n := min(int64(len(p)), o.left)
		if err := o.emit(p[:n]); err != nil {
			return err
		}
		p, o.left = p[n:], o.left-n
	}
	return nil
}

// end checks that the current tensor got all its data.
func (o *outFile) end() error {
	if o.left != 0 || len(o.pieces) != 0 {
		return fmt.Errorf("write %s: tensor %q: %d bytes short", o.path, o.name, o.left)
	}
	return nil
}

// finish appends the crc_num trailer when trailer is set, flushes, fsyncs
// and closes the temp file; it returns the CRC-32 of the file's content
// (all of it but a trailer).
func (o *outFile) finish(trailer bool) (uint32, error) {
	sum := o.crc.Sum32()
	if trailer {
		var t [crcTrailerLen]byte
		copy(t[:], crcMagic)
		binary.BigEndian.PutUint32(t[crcTrailerLen-4:], sum)
		if _, err := o.w.Write(t[:]); err != nil {
			return 0, fmt.Errorf("write %s: %w", o.path, err)
		}
		o.written.Add(int64(len(t)))
	}
	if err := o.w.Flush(); err != nil {
		return 0, fmt.Errorf("write %s: %w", o.path, err)
	}
	o.behind.stop()
	if err := o.f.Sync(); err != nil {
		return 0, fmt.Errorf("write %s: sync: %w", o.path, err)
	}
	if err := o.f.Close(); err != nil {
		return 0, fmt.Errorf("write %s: %w", o.path, err)
	}
	return sum, nil
}

// discard removes the temp file.
func (o *outFile) discard() {
	o.behind.stop()
	o.f.Close()
	os.Remove(o.f.Name())
}
