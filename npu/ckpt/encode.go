package ckpt

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/mspipe/mspipe/internal/atomicfile"
	ckptpb "github.com/mspipe/mspipe/npu/ckpt/proto"
)

// DefaultSliceBytes is MindSpore's slice limit (SLICE_SIZE = 512*1024 KB in
// mindspore/train/serialization.py): a tensor with more data bytes than this
// is stored as several Values.
const DefaultSliceBytes = 512 << 20

// crcMagic and crcTrailerLen describe the trailer newer MindSpore versions
// append with save_checkpoint(crc_check=True): "crc_num" and the CRC-32 as a
// 10-byte big-endian integer.
const (
	crcMagic      = "crc_num"
	crcValueLen   = 10
	crcTrailerLen = len(crcMagic) + crcValueLen
)

// WriteOptions tunes Write and Encode. The zero value writes what MindSpore's
// save_checkpoint writes by default.
type WriteOptions struct {
	// SliceBytes is the slice limit in bytes; 0 means DefaultSliceBytes.
	// Tests lower it to exercise slicing on small tensors.
	SliceBytes int64
	// CRC appends MindSpore's crc_num trailer (crc_check=True). Without
	// it the file is one plain protobuf Checkpoint, what MindSpore's
	// save_checkpoint writes by default and what every version reads.
	CRC bool
	// Digest makes Write put a sidecar digest beside the file (see
	// DigestExt), which ReadFile checks; the file itself is unchanged.
	// Without it Write removes a sidecar an earlier write left there.
	Digest bool
	// Progress, when set, is called by Write with the checkpoint's path
	// and the bytes written so far into its temporary file, after each
	// piece: fault injection (npu/train's fault, kind kill_during_save)
	// kills the process there, part-way through a write.
	Progress func(path string, written int64)
}

// progressWriter reports the bytes written through it.
type progressWriter struct {
	w       io.Writer
	path    string
	written int64
	report  func(path string, written int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.written += int64(n)
	p.report(p.path, p.written)
	return n, err
}

// Write atomically writes tensors to path as a MindSpore checkpoint: a reader
// sees the old file or the complete new one, and a failed write leaves no
// partial file behind. With opts.Digest the sidecar digest is written
// (atomically too) right after the file; a crash between the two leaves a
// complete checkpoint without one, which ReadVerified refuses. A sidecar of
// an earlier write is removed first, so no reader pairs the new file with
// the old digest.
func Write(path string, tensors []Tensor, opts WriteOptions) error {
	var scratch []byte
	return write(path, tensors, opts, &scratch)
}

// write is Write encoding through *scratch, which it may grow and keeps
// for the caller's next write (ModelCheckpoint: one per series).
func write(path string, tensors []Tensor, opts WriteOptions, scratch *[]byte) error {
	if err := removeDigest(path); err != nil {
		return err
	}
	sum := sha256.New()
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		if opts.Digest {
			w = io.MultiWriter(w, sum)
		}
		if opts.Progress != nil {
			w = &progressWriter{w: w, path: path, report: opts.Progress}
		}
		return encodeInto(w, tensors, opts, scratch)
	})
	if err != nil {
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	if !opts.Digest {
		return nil
	}
	return writeDigest(path, sum.Sum(nil))
}

// Encode writes tensors to w in checkpoint format, one protobuf Checkpoint
// message per Value as MindSpore does. Each tensor is validated just before
// it is encoded, so an invalid tensor fails the encoding part-way, after
// what was encoded before it may have been written; Write discards such a
// partial file.
func Encode(w io.Writer, tensors []Tensor, opts WriteOptions) error {
	var scratch []byte
	return encodeInto(w, tensors, opts, &scratch)
}

// EncodeBufferBytes is how many encoded bytes the encoder gathers before it
// writes them. One write per tensor cost a ResNet-20 checkpoint (175
// tensors, 2 MiB) 175 write system calls, which a save every step paid on
// each rank; a larger buffer would save little more and cost memory. The
// buffer holds this much, or one message when a tensor's is larger.
const EncodeBufferBytes = 256 << 10

// encodeInto is Encode marshalling the messages into *scratch, which it grows
// to EncodeBufferBytes or the largest message (or the whole encoding, when
// smaller) and leaves there for the next call. With opts.Progress it writes
// every message on its own, as fault injection needs (a kill part-way
// through a write must find part of even a small file unwritten).
func encodeInto(w io.Writer, tensors []Tensor, opts WriteOptions, scratch *[]byte) error {
	limit := opts.SliceBytes
	if limit == 0 {
		limit = DefaultSliceBytes
	}
	if limit < 0 {
		return fmt.Errorf("slice limit %d bytes: must be positive", limit)
	}
	sum := crc32.NewIEEE()
	out := w
	if opts.CRC {
		out = io.MultiWriter(w, sum)
	}
	seen := make(map[string]bool, len(tensors))
	// One message, refilled for every Value: a save every step would
	// otherwise allocate six objects per tensor for the collector.
	var tag, dtype string
	content := &ckptpb.TensorProto{TensorType: &dtype}
	msg := &ckptpb.Checkpoint{Value: []*ckptpb.Checkpoint_Value{{
		Tag:   &tag,
		Value: &ckptpb.Checkpoint_Value_Tensor{Tensor: content},
	}}}
	buf := (*scratch)[:0]
	if want := min(encodedEstimate(tensors), EncodeBufferBytes); cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	opt := proto.MarshalOptions{Deterministic: true}
	defer func() { *scratch = buf }()
	for _, t := range tensors {
		if err := t.Validate(); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("tensor %q given twice: %w", t.Name, ErrName)
		}
		seen[t.Name] = true
		dims := t.Dims
		if len(dims) == 0 {
			dims = []int64{0} // MindSpore's marker for a scalar
		}
		size, _ := DTypeSize(t.DType)
		tag, dtype = t.Name, t.DType
		content.Dims = dims
		for _, piece := range splitData(t.Data, size, limit) {
			content.TensorContent = piece
			if len(buf) > 0 && len(buf)+opt.Size(msg) > cap(buf) {
				if _, err := out.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
			var err error
			buf, err = opt.MarshalAppend(buf, msg)
			if err != nil {
				return fmt.Errorf("tensor %q: encode: %w", t.Name, err)
			}
			if opts.Progress != nil {
				if _, err := out.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
	}
	if len(buf) > 0 {
		if _, err := out.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	if opts.CRC {
		var trailer [crcTrailerLen]byte
		copy(trailer[:], crcMagic)
		binary.BigEndian.PutUint32(trailer[crcTrailerLen-4:], sum.Sum32())
		if _, err := w.Write(trailer[:]); err != nil {
			return err
		}
	}
	return nil
}

// encodedEstimate is about the size of tensors encoded: their data and a
// generous allowance for each message's framing, name, type and dims.
func encodedEstimate(tensors []Tensor) int {
	n := 0
	for _, t := range tensors {
		n += len(t.Data) + len(t.Name) + len(t.DType) + 11*len(t.Dims) + 32
	}
	return n
}

// splitData cuts data into the pieces MindSpore's save_checkpoint writes:
// one piece when it fits the limit, else ceil(len/limit) pieces split like
// numpy.array_split on the flattened elements (the first n%k pieces get one
// element more). Pieces are never nil, so an empty tensor still writes its
// required tensor_content field.
func splitData(data []byte, elemSize int, limit int64) [][]byte {
	total := int64(len(data))
	if total <= limit {
		if data == nil {
			data = []byte{}
		}
		return [][]byte{data}
	}
	k := (total + limit - 1) / limit
	n := total / int64(elemSize)
	base, extra := n/k, n%k
	pieces := make([][]byte, 0, k)
	var off int64
	for i := int64(0); i < k; i++ {
		cnt := base
		if i < extra {
			cnt++
		}
		end := off + cnt*int64(elemSize)
		pieces = append(pieces, data[off:end:end])
		off = end
	}
	return pieces
}
