package collective

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unsafe"
)

// Frames. Every message after the handshake is a frame: a 32-byte
// little-endian header followed by nbytes of payload.
//
//	offset size field
//	0      1    kind (data, heartbeat, abort, goodbye)
//	1      1    op: the collective (data frames)
//	2      2    phase: the step kind inside the collective (data frames)
//	4      4    seq: the collective call number, counted by every rank
//	8      8    count: the call's element count every rank must agree on
//	16     8    offset: element offset of the payload in the call's buffer
//	24     4    nbytes: payload length in bytes
//	28     4    extra: the reduce op or the broadcast root (a group's reduce
//	            op in the low byte, a hash of its ranks above)
//
// Data frames carry float32 values, little-endian. A receiver knows exactly
// which frame comes next from each peer, so it compares the whole header
// with the one it expects: a mismatch means the ranks called different
// collectives (ErrOutOfStep) and is reported with both sides' calls.
const headerLen = 32

type frameKind uint8

const (
	kindData      frameKind = 1
	kindHeartbeat frameKind = 2 // control connection: "still alive"
	kindAbort     frameKind = 3 // control connection: "I failed; here is why"
	kindGoodbye   frameKind = 4 // control connection: "I closed my communicator"
)

// opCode names a collective in frames and errors.
type opCode uint8

const (
	opInit opCode = iota
	opAllReduce
	opReduceScatter
	opAllGather
	opBroadcast
	opBarrier
	opAllToAll
	opAlloc // shared-memory allocation (on the wire only between servers)
	opExchange
	opGroupAllReduce
)

// mayUseShm reports whether the collective can run through shared memory
// (then its body announces which path it takes).
func (o opCode) mayUseShm() bool {
	switch o {
	case opAllReduce, opReduceScatter, opAllGather, opBroadcast, opAlloc:
		return true
	}
	return false
}

func (o opCode) String() string {
	switch o {
	case opInit:
		return "init"
	case opAllReduce:
		return "allreduce"
	case opReduceScatter:
		return "reducescatter"
	case opAllGather:
		return "allgather"
	case opBroadcast:
		return "broadcast"
	case opBarrier:
		return "barrier"
	case opAllToAll:
		return "alltoall"
	case opAlloc:
		return "alloc"
	case opExchange:
		return "exchange"
	case opGroupAllReduce:
		return "groupallreduce"
	}
	return "op" + strconv.Itoa(int(o))
}

// Phases of a collective, so frames of a reduce step and of a gather step
// of the same chunk cannot be confused.
const (
	phaseReduce uint16 = 1
	phaseGather uint16 = 2
	phaseDirect uint16 = 3 // broadcast, barrier, all-to-all, exchange
	phaseLength uint16 = 4 // exchange: a header-only frame whose offset is the pair's element count
)

type header struct {
	kind   frameKind
	op     opCode
	phase  uint16
	seq    uint32
	count  uint64
	offset uint64
	nbytes uint32
	extra  uint32
}

func (h *header) put(b []byte) {
	_ = b[headerLen-1]
	b[0] = byte(h.kind)
	b[1] = byte(h.op)
	binary.LittleEndian.PutUint16(b[2:], h.phase)
	binary.LittleEndian.PutUint32(b[4:], h.seq)
	binary.LittleEndian.PutUint64(b[8:], h.count)
	binary.LittleEndian.PutUint64(b[16:], h.offset)
	binary.LittleEndian.PutUint32(b[24:], h.nbytes)
	binary.LittleEndian.PutUint32(b[28:], h.extra)
}

func parseHeader(b []byte) header {
	_ = b[headerLen-1]
	return header{
		kind:   frameKind(b[0]),
		op:     opCode(b[1]),
		phase:  binary.LittleEndian.Uint16(b[2:]),
		seq:    binary.LittleEndian.Uint32(b[4:]),
		count:  binary.LittleEndian.Uint64(b[8:]),
		offset: binary.LittleEndian.Uint64(b[16:]),
		nbytes: binary.LittleEndian.Uint32(b[24:]),
		extra:  binary.LittleEndian.Uint32(b[28:]),
	}
}

// describeCall says which call a data header belongs to, for ErrOutOfStep.
func (h header) describeCall() string {
	if h.kind != kindData {
		return fmt.Sprintf("a frame of kind %d", h.kind)
	}
	if h.op == opExchange { // per-pair lengths: there is no call-wide count
		return fmt.Sprintf("%s #%d", h.op, h.seq)
	}
	s := fmt.Sprintf("%s #%d of %d elements", h.op, h.seq, h.count)
	switch h.op {
	case opGroupAllReduce:
		s += fmt.Sprintf(" (%s, group %06x)", Op(h.extra&0xff), h.extra>>8)
	case opAllReduce, opReduceScatter:
		s += " (" + Op(h.extra).String() + ")"
	case opBroadcast:
		s += " (root " + strconv.FormatUint(uint64(h.extra), 10) + ")"
	}
	return s
}

// Abort payloads say who is at fault and why:
//
//	offset size field
//	0      4    culprit rank (int32; the sender itself for local failures)
//	4      1    code (abortClosed, ...)
//	5      3    zero
//	8      8    timeout in nanoseconds (abortTimeout)
//	16     -    UTF-8 text, at most maxAbortText bytes
const (
	abortFixed   = 16
	maxAbortText = 512
)

const (
	abortClosed   uint8 = 1
	abortLeft     uint8 = 2
	abortTimeout  uint8 = 3
	abortAborted  uint8 = 4
	abortOutOfStp uint8 = 5
	abortProtocol uint8 = 6
)

// abortNotice is the decoded payload of an abort frame.
type abortNotice struct {
	culprit int32
	code    uint8
	timeout int64
	text    string
}

func (a abortNotice) encode() []byte {
	text := a.text
	if len(text) > maxAbortText {
		text = text[:maxAbortText]
	}
	b := make([]byte, abortFixed+len(text))
	binary.LittleEndian.PutUint32(b[0:], uint32(a.culprit))
	b[4] = a.code
	binary.LittleEndian.PutUint64(b[8:], uint64(a.timeout))
	copy(b[abortFixed:], text)
	return b
}

// decodeAbort parses an abort payload of a job with size ranks.
func decodeAbort(b []byte, size int) (abortNotice, error) {
	if len(b) < abortFixed || len(b) > abortFixed+maxAbortText {
		return abortNotice{}, fmt.Errorf("%w: abort notice of %d bytes", ErrProtocol, len(b))
	}
	a := abortNotice{
		culprit: int32(binary.LittleEndian.Uint32(b[0:])),
		code:    b[4],
		timeout: int64(binary.LittleEndian.Uint64(b[8:])),
		text:    string(b[abortFixed:]),
	}
	if a.culprit < 0 || int(a.culprit) >= size {
		return abortNotice{}, fmt.Errorf("%w: abort notice names rank %d of %d", ErrProtocol, a.culprit, size)
	}
	if a.code < abortClosed || a.code > abortProtocol {
		return abortNotice{}, fmt.Errorf("%w: abort notice with code %d", ErrProtocol, a.code)
	}
	if a.code == abortTimeout && a.timeout <= 0 {
		return abortNotice{}, fmt.Errorf("%w: abort notice with timeout %d", ErrProtocol, a.timeout)
	}
	return a, nil
}

// hostLittleEndian reports whether float32 slices are already in wire
// order in memory, so frames can be written and read without conversion.
func hostLittleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// floatBytes views f as bytes in host order; valid while f is.
func floatBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// encodeFloats writes f little-endian into b, which holds 4*len(f) bytes.
func encodeFloats(b []byte, f []float32) {
	b = b[:4*len(f)]
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
}

// decodeFloats reads len(f) little-endian float32 values from b.
func decodeFloats(f []float32, b []byte) {
	b = b[:4*len(f)]
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
}
