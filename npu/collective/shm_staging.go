package collective

// Staging memory: shared memory for the collectives on ordinary buffers
// (Exchange and SendRecv, GroupAllReduce, and AllReduce and AllGather of
// buffers not from Alloc) between the ranks of one server.
//
// Each rank of a server owns a staging file that every other rank of the
// server maps during Init; the owner unlinks it once all have. The file
// holds the rank's stage word, and two halves that alternate between calls,
// each a header (the call, a table of offsets and lengths by destination,
// the group) and a data area. A rank copies what it sends into the half of
// the call, publishes the stage "written", and the ranks it sends to wait
// for that, check the header (the same call, the expected length) and copy
// out; each publishes "done" once it has read everything of the call. A
// half is written again two calls later, after the ranks that read it then
// have said done, so a rank seldom waits to write, and no call needs a
// barrier of the whole server: a rank waits only for the ranks it reads.
//
// Waits spin briefly, then sleep on the stage word of the rank they wait
// for (a futex; a bit of the word says someone sleeps on it, so a publish
// makes a system call only then), in slices, checking between slices what
// the TCP control connections say, exactly as the barriers of shm.go do: a
// rank that died, left or aborted fails the wait at once with the usual
// *PeerError, and a rank that does not get there within the timeout is
// blamed as over TCP.
//
// The data areas are sparse: the owner allocates tmpfs memory for what a
// call needs (fallocate, so a full tmpfs is an error and never a SIGBUS)
// and keeps it for later calls. A call that does not fit, or whose memory
// cannot be allocated, is marked in the header and its data goes over TCP.

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mspipe/mspipe/npu/tensor"
)

const (
	// Phases of a call in a stage word: (call number << 2) | phase.
	stageWritten = 1 // the rank's half holds its data of the call
	stageReduced = 2 // GroupAllReduce: its chunk of the result is in its half
	stageDone    = 3 // it has read everything it needs of the call

	stageSleepers = 1 << 31 // someone sleeps on the word: wake it on publish
	stageMask     = stageSleepers - 1

	// stageStale is how many calls old a call number in a stage word, or
	// a half's last call, may grow before stageUpkeep renews or retires
	// it: stageReached orders stage values only within 2^28 calls, and a
	// value further back would read as ahead (or a target as behind).
	stageStale = 1 << 26

	stageHalfBytes  = 1 << 30 // data bytes per half; a call needing more goes over TCP
	stageCommitUnit = 1 << 20 // tmpfs memory is allocated in these steps

	// stageDirectMax is the largest GroupAllReduce that every member
	// reduces whole, from every member's copy (one wait instead of two).
	stageDirectMax = 8192
	stagePiece     = 1 << 16 // elements per call of tensor.SumBroadcast
	stageBlock     = 1024    // elements per block of the portable reduction

	// Header fields (bytes into a half's header).
	hdrSeq     = 0
	hdrOp      = 8
	hdrCount   = 16
	hdrExtra   = 24
	hdrViaTCP  = 32
	hdrGroupN  = 40
	hdrEntered = 48 // when the rank entered the call (Unix nanoseconds), for Comm.LastCall
	hdrStaged  = 56 // when its data was staged (Unix nanoseconds), for Comm.LastCall
	hdrTable   = 64 // then 16 bytes (offset, length in elements) per rank, then the group (4 bytes per rank)
)

// staging is this rank's view of the staging files of its server.
type staging struct {
	self    int
	maps    [][]byte    // by rank; nil for ranks of other servers
	data    [][]float32 // by rank*2+half: the data areas as float32
	file    *os.File    // this rank's file, kept open to allocate memory
	hdrSize int
	dataOff int

	limit     int       // bytes a call may stage (stageHalfBytes; tests lower it)
	committed [2]int    // bytes of each own data area allocated so far
	inUse     [2]bool   // whether lastUse holds a call (0 is one once the numbers wrap)
	lastUse   [2]uint32 // the call that last wrote each own half
	readers   [2][]int  // the ranks that read it in that call
	published uint32    // the call of the value in this rank's stage word

	srcs, dsts [][]float32 // a call's arguments of reduce
	ps, pd     [][]float32 // reduce's pieces of them
	acc        []float32
}

func stageValue(seq uint32, phase uint32) uint32 { return (seq<<2 | phase) & stageMask }

// stageReached reports whether stage value v is at or past target, in the
// 31-bit modular order of stage values: right while the two calls are
// less than 2^28 apart (stageUpkeep keeps them so).
func stageReached(v, target uint32) bool { return int32((v-target)<<1) >= 0 }

// stagingLayout returns the header size and the data offset of the
// staging files of a communicator of n ranks, and the file size.
func stagingLayout(n int) (hdrSize, dataOff, size int) {
	hdrSize = (hdrTable + 20*n + 63) / 64 * 64
	dataOff = pageRound(64 + 2*hdrSize)
	return hdrSize, dataOff, dataOff + 2*stageHalfBytes
}

// setupStaging gives the ranks of this server their staging files, at the
// end of Init: every rank creates its own, the ranks agree that all did,
// map each other's, agree that all did, and unlink their own. If a rank
// cannot, the server's ranks stage nothing and use TCP, unless shared
// memory is required (TransportShm), which fails Init.
func (c *Comm) setupStaging() error {
	g := c.shm
	if len(g.members) == 1 {
		return nil
	}
	hdrSize, dataOff, size := stagingLayout(c.size)
	name := func(r int) string { return filepath.Join(g.dir, fmt.Sprintf("mspipe-%s-r%d-stage", g.tag, r)) }
	st := &staging{self: c.rank, maps: make([][]byte, c.size), hdrSize: hdrSize, dataOff: dataOff, limit: stageHalfBytes,
		srcs: make([][]float32, c.size), dsts: make([][]float32, 2),
		ps: make([][]float32, c.size), pd: make([][]float32, 2), acc: make([]float32, stageBlock)}
	own, f, err := mapSparse(name(c.rank), size, true)
	linked := err == nil
	if err == nil {
		st.maps[c.rank], st.file = own, f
		err = commitRange(f, 0, int64(dataOff))
	}
	unlink := func() {
		if linked {
			_ = os.Remove(name(c.rank))
			linked = false
		}
	}
	defer unlink()
	drop := func() {
		for r, m := range st.maps {
			if m != nil {
				unmap(m)
				st.maps[r] = nil
			}
		}
		if st.file != nil {
			st.file.Close()
		}
	}
	// agree publishes whether this rank succeeded (err) and returns the
	// ranks of the server that did not.
	agree := func(step uint64, err error) ([]string, error) {
		d := shmDesc{op: uint64(opInit), region: step}
		if err != nil {
			d.offset = allocFailed
		}
		g.announce(c.rank, d)
		if berr := c.shmBarrier(); berr != nil {
			return nil, berr
		}
		var failed []string
		for _, q := range g.members {
			if g.load(q).offset == allocFailed {
				failed = append(failed, fmt.Sprint(q))
			}
		}
		// The next step's descriptors replace these: none before every
		// rank has read them.
		if berr := c.shmBarrier(); berr != nil {
			return nil, berr
		}
		return failed, nil
	}
	failed, berr := agree(1, err)
	if berr == nil && len(failed) == 0 {
		for _, q := range g.members {
			if q != c.rank && err == nil {
				st.maps[q], _, err = mapSparse(name(q), size, false)
			}
		}
		failed, berr = agree(2, err) // every rank has mapped every file
	}
	if berr != nil {
		drop()
		return berr
	}
	if len(failed) > 0 {
		drop()
		if c.cfg.Transport == TransportShm {
			why := ""
			if err != nil {
				why = fmt.Sprintf(" (here: %v)", err)
			}
			return fmt.Errorf("collective: init: %w: shared memory transport required, but rank(s) %s cannot map the staging files in %s%s",
				ErrConfig, strings.Join(failed, ", "), g.dir, why)
		}
		return nil
	}
	st.data = make([][]float32, 2*c.size)
	for q, m := range st.maps {
		if m != nil {
			for h := range 2 {
				st.data[2*q+h] = unsafe.Slice((*float32)(unsafe.Pointer(&m[dataOff+h*stageHalfBytes])), stageHalfBytes/4)
			}
		}
	}
	c.bellMu.Lock()
	g.stg = st
	c.bellMu.Unlock()
	return nil
}

// stagingWith reports whether this rank stages data for rank q (q is
// another rank of its server and staging is set up).
func (c *Comm) stagingWith(q int) bool {
	return c.shm != nil && c.shm.stg != nil && q != c.rank && c.shm.stg.maps[q] != nil
}

// stagingAmong reports whether this rank stages data for every other rank
// of ranks.
func (c *Comm) stagingAmong(ranks []int) bool {
	for _, q := range ranks {
		if q != c.rank && !c.stagingWith(q) {
			return false
		}
	}
	return true
}

func (st *staging) word(r int) *uint32 { return (*uint32)(unsafe.Pointer(&st.maps[r][0])) }

func (st *staging) header(r, h int) []byte {
	o := 64 + h*st.hdrSize
	return st.maps[r][o : o+st.hdrSize]
}

func (st *staging) half(r, h int) []float32 { return st.data[2*r+h] }

// wake wakes every sleeper on the stage words of this server, so that
// they look at their communicator's state again.
func (st *staging) wake() {
	for q, m := range st.maps {
		if m != nil {
			futexWakeAll(st.word(q))
		}
	}
}

// close unmaps the staging files; the caller holds bellMu.
func (st *staging) close() {
	for q, m := range st.maps {
		if m != nil {
			unmap(m)
			st.maps[q] = nil
		}
	}
	st.data = nil
	if st.file != nil {
		st.file.Close()
		st.file = nil
	}
}

// publish sets this rank's stage for the running call and wakes whoever
// sleeps on it.
func (c *Comm) publish(phase uint32) {
	st := c.shm.stg
	w := st.word(c.rank)
	if phase == stageWritten {
		c.stampStaged()
	}
	st.published = c.cur.seq
	if old := atomic.SwapUint32(w, stageValue(c.cur.seq, phase)); old&stageSleepers != 0 {
		futexWakeAll(w)
	}
}

// stageUpkeep, at the start of every call, keeps the call numbers that
// other ranks compare with stageReached within stageStale calls of the
// running one. A rank that stages nothing for 2^28 calls (its calls use
// Alloc buffers, TCP, or groups of one) would otherwise leave a stage
// word that reads as ahead of a later call, and a peer would take the
// stale header for this call's. So the word is renewed to "done" with the
// call before this one (a rank running this call is done with every
// earlier one). And a half last written stageStale calls ago is retired
// once its readers are done with it (they always are by then), so that
// stageBegin never compares their words with a call so old that their
// words, far past it, would read as behind it.
func (c *Comm) stageUpkeep() error {
	st := c.shm.stg
	seq := c.cur.seq
	for h := range st.inUse {
		if !st.inUse[h] || seq-st.lastUse[h] < stageStale {
			continue
		}
		for _, q := range st.readers[h] {
			if err := c.waitStage(q, stageValue(st.lastUse[h], stageDone), false); err != nil {
				return err
			}
		}
		st.inUse[h] = false
	}
	if seq-st.published >= stageStale {
		st.published = seq - 1
		w := st.word(c.rank)
		if old := atomic.SwapUint32(w, stageValue(seq-1, stageDone)); old&stageSleepers != 0 {
			futexWakeAll(w)
		}
	}
	return nil
}

// stageBegin returns the half of this rank's staging the running call
// writes, once the ranks that read it two calls ago are done with it, and
// records readers as the ranks that will read it now.
func (c *Comm) stageBegin(readers []int) (int, error) {
	st := c.shm.stg
	h := int(c.cur.seq & 1)
	if st.inUse[h] {
		for _, q := range st.readers[h] {
			if err := c.waitStage(q, stageValue(st.lastUse[h], stageDone), false); err != nil {
				return 0, err
			}
		}
	}
	st.inUse[h], st.lastUse[h] = true, c.cur.seq
	st.readers[h] = append(st.readers[h][:0], readers...)
	return h, nil
}

// stageFits makes room for n elements in half h of this rank's staging,
// allocating tmpfs memory as needed, and reports whether it could.
func (c *Comm) stageFits(h, n int) bool {
	st := c.shm.stg
	need := 4 * n
	if need > st.limit {
		return false
	}
	if need <= st.committed[h] {
		return true
	}
	grow := min(stageHalfBytes, (need+stageCommitUnit-1)/stageCommitUnit*stageCommitUnit)
	if commitRange(st.file, int64(st.dataOff+h*stageHalfBytes), int64(grow)) != nil {
		return false
	}
	st.committed[h] = grow
	return true
}

// putHeader writes the running call into this rank's header of half h,
// and whether its data goes over TCP instead.
func (c *Comm) putHeader(h int, viaTCP bool) []byte {
	b := c.shm.stg.header(c.rank, h)
	le := binary.LittleEndian
	le.PutUint64(b[hdrSeq:], uint64(c.cur.seq))
	le.PutUint64(b[hdrOp:], uint64(c.cur.op))
	le.PutUint64(b[hdrCount:], c.cur.count)
	le.PutUint64(b[hdrExtra:], uint64(c.cur.extra))
	var v uint64
	if viaTCP {
		v = 1
	}
	le.PutUint64(b[hdrViaTCP:], v)
	le.PutUint64(b[hdrGroupN:], 0)
	le.PutUint64(b[hdrEntered:], uint64(c.cur.entered))
	return b
}

// putEntry records block q of this rank's data: off and n elements.
func putEntry(b []byte, q, off, n int) {
	binary.LittleEndian.PutUint64(b[hdrTable+16*q:], uint64(off))
	binary.LittleEndian.PutUint64(b[hdrTable+16*q+8:], uint64(n))
}

func entry(b []byte, q int) (off, n int) {
	return int(binary.LittleEndian.Uint64(b[hdrTable+16*q:])), int(binary.LittleEndian.Uint64(b[hdrTable+16*q+8:]))
}

// putGroup records the group of a GroupAllReduce in a header of a
// communicator of size ranks.
func putGroup(b []byte, size int, group []int) {
	binary.LittleEndian.PutUint64(b[hdrGroupN:], uint64(len(group)))
	for i, g := range group {
		binary.LittleEndian.PutUint32(b[hdrTable+16*size+4*i:], uint32(g))
	}
}

// inGroup reports whether a header's group contains rank.
func inGroup(b []byte, size, rank int) bool {
	n := int(binary.LittleEndian.Uint64(b[hdrGroupN:]))
	for i := range min(n, size) {
		if int(binary.LittleEndian.Uint32(b[hdrTable+16*size+4*i:])) == rank {
			return true
		}
	}
	return false
}

// headerCall returns the call a header describes, as a frame header.
func headerCall(b []byte) header {
	le := binary.LittleEndian
	return header{kind: kindData, op: opCode(le.Uint64(b[hdrOp:])), seq: uint32(le.Uint64(b[hdrSeq:])),
		count: le.Uint64(b[hdrCount:]), extra: uint32(le.Uint64(b[hdrExtra:]))}
}

func viaTCP(b []byte) bool { return binary.LittleEndian.Uint64(b[hdrViaTCP:]) != 0 }

// awaitWritten waits until rank q has written its half of the running
// call and returns its header, checked against this rank's call: a rank in
// another call is out of step. A GroupAllReduce member whose group leaves
// this rank out does not talk to it in this call, as over TCP: this rank
// then waits for the failure someone else reports (ok false).
func (c *Comm) awaitWritten(q, h int) (hdr []byte, ok bool, err error) {
	if err := c.waitStage(q, stageValue(c.cur.seq, stageWritten), true); err != nil {
		return nil, false, err
	}
	hdr = c.shm.stg.header(q, h)
	want := c.callHeader()
	got := headerCall(hdr)
	if got == want {
		c.sawPeer(int64(binary.LittleEndian.Uint64(hdr[hdrEntered:])), int64(binary.LittleEndian.Uint64(hdr[hdrStaged:])))
		return hdr, true, nil
	}
	// A member whose group leaves this rank out does not count it among
	// the readers of its half (stageBegin), so two calls on it may be
	// writing that half again: the header read here is then of that later
	// call, or a mix of both, and the error below names it. (A mix could
	// pass as this call's only if that later call had this call's length
	// and this rank's group: members that disagree on groups are out of
	// step already, and that is not guarded further.)
	if got.seq == want.seq && got.op == opGroupAllReduce && want.op == opGroupAllReduce && !inGroup(hdr, c.size, c.rank) {
		return nil, false, c.awaitFailure(q)
	}
	return nil, false, c.fail(&PeerError{Rank: q, Addr: c.cfg.Addrs[q], Via: -1,
		Err: fmt.Errorf("%w: it called %s, rank %d called %s", ErrOutOfStep, got.describeCall(), c.rank, want.describeCall())})
}

// awaitFailure waits, up to the timeout, for the failure of a call that
// rank q takes part in without this rank; past the timeout it blames the
// wait as over TCP.
func (c *Comm) awaitFailure(q int) error {
	c.waitingOn.Store(int32(q))
	defer c.waitingOn.Store(-1)
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-c.broken:
		return c.Err()
	case <-t.C:
		return c.peerFailure(c.peers[q], os.ErrDeadlineExceeded)
	}
}

// waitStage returns once rank q's stage word is at or past target. It
// fails when the communicator fails, when q's control connection ends, and
// when q does not get there within the timeout; with inCall, also when
// q's call descriptor shows it in another call with the same number.
func (c *Comm) waitStage(q int, target uint32, inCall bool) error {
	st := c.shm.stg
	w := st.word(q)
	p := c.peers[q]
	var deadline time.Time
	defer func() {
		if !deadline.IsZero() {
			c.waitingOn.Store(-1)
		}
	}()
	for spin := 0; ; spin++ {
		v := atomic.LoadUint32(w)
		if stageReached(v&stageMask, target) {
			return nil
		}
		if c.isBroken.Load() {
			return c.Err()
		}
		if inCall {
			if err := c.checkPeerCall(q); err != nil {
				return err
			}
		}
		select {
		case <-p.resolved:
			return c.peerFailure(p, errPeerGone)
		default:
		}
		now := time.Now()
		if spin == 0 {
			deadline = now.Add(c.timeout)
			c.waitingOn.Store(int32(q))
		} else if now.After(deadline) {
			return c.peerFailure(p, os.ErrDeadlineExceeded)
		}
		if spin < shmSpins {
			runtime.Gosched()
			continue
		}
		if v&stageSleepers == 0 {
			if !atomic.CompareAndSwapUint32(w, v, v|stageSleepers) {
				continue
			}
			v |= stageSleepers
		}
		futexWait(w, v, min(shmWaitStep, deadline.Sub(now)))
	}
}

// checkPeerCall fails the communicator if rank q's call descriptor shows
// it in a call of the same number as the running one that will never
// write staging for it: another collective, or (GroupAllReduce of this
// rank's group) another length. A rank on shared buffers from Alloc is
// left to report this one.
func (c *Comm) checkPeerCall(q int) error {
	d := c.shm.load(q)
	if d.seq != uint64(c.cur.seq) {
		return nil
	}
	if d.region != noRegion {
		// q waits in a barrier of the Alloc path, which sees this rank's
		// call and reports it, as it reports a call over TCP.
		return c.awaitFailure(q)
	}
	mine := c.current(noRegion, 0)
	bad := opCode(d.op) != c.cur.op
	switch {
	case bad, c.cur.op == opExchange:
	case c.cur.op == opGroupAllReduce:
		bad = d.extra == mine.extra && d.count != mine.count // another group: its header tells
	default:
		bad = d.count != mine.count || d.extra != mine.extra
	}
	if !bad {
		return nil
	}
	theirs := header{kind: kindData, op: opCode(d.op), seq: uint32(d.seq), count: d.count, extra: uint32(d.extra)}.describeCall()
	return c.fail(&PeerError{Rank: q, Addr: c.cfg.Addrs[q], Via: -1,
		Err: fmt.Errorf("%w: it called %s, rank %d called %s", ErrOutOfStep, theirs, c.rank, c.callHeader().describeCall())})
}

// callHeader is the running call as a frame header.
func (c *Comm) callHeader() header {
	return header{kind: kindData, op: c.cur.op, seq: c.cur.seq, count: c.cur.count, extra: c.cur.extra}
}

// reduce reduces the elements of srcs in their order
// ((s0 op s1) op s2) ..., finishes op for size ranks and stores the
// result into every dst: the order of Mesh and GroupAllReduce over TCP,
// so the same bits. A dst may be a src (the same elements).
func (st *staging) reduce(op Op, dsts, srcs [][]float32, size int) {
	n := len(dsts[0])
	if (op == Sum || op == Mean) && n >= 4*stageBlock {
		var divisor float32
		if op == Mean && size > 1 {
			divisor = float32(size)
		}
		ds, ss := st.pd[:len(dsts)], st.ps[:len(srcs)]
		for p := 0; p < n; p += stagePiece {
			e := min(n, p+stagePiece)
			for i, d := range dsts {
				ds[i] = d[p:e]
			}
			for i, s := range srcs {
				ss[i] = s[p:e]
			}
			tensor.SumBroadcast(ds, ss, divisor)
		}
		return
	}
	for b := 0; b < n; b += stageBlock {
		e := min(n, b+stageBlock)
		acc := st.acc[:e-b]
		copy(acc, srcs[0][b:e])
		for _, s := range srcs[1:] {
			reduceInto(op, acc, s[b:e])
		}
		finish(op, acc, size)
		for _, d := range dsts {
			copy(d[b:e], acc)
		}
	}
}

// others returns ranks without this rank.
func (c *Comm) others(ranks []int) []int {
	out := make([]int, 0, len(ranks))
	for _, q := range ranks {
		if q != c.rank {
			out = append(out, q)
		}
	}
	return out
}

// serverPeers returns the other ranks of this server.
func (c *Comm) serverPeers() []int { return c.others(c.shm.members) }

// stagingFlat reports whether every rank is on this server and stages.
func (c *Comm) stagingFlat() bool {
	return c.shm != nil && c.shm.stg != nil && c.shm.flat()
}
