package collective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// maxSegments bounds the segments a chunk is cut into; larger chunks get
// larger segments. Send queues hold 4*maxSegments frames, which keeps every
// algorithm free of deadlock: a rank never waits for queue space while the
// frames it needs are stuck behind a full queue (see ringReduceScatter).
const maxSegments = 64

// ctrlWriteLimit bounds writes on control connections (heartbeats, abort
// notices, goodbyes), which are small and must not hold up a failing rank.
const ctrlWriteLimit = time.Second

// Comm is one rank's endpoint of a communicator: connections to every other
// rank and the collectives over them. Collectives must be called in the same
// order with matching arguments on every rank, one at a time; Close may be
// called at any time from any goroutine.
type Comm struct {
	cfg       Config
	rank      int
	size      int
	timeout   time.Duration
	grace     time.Duration // how long a closed connection waits for the control connection to explain it
	heartbeat time.Duration
	segElems  int
	zeroCopy  bool // host order is wire order: frames read and write float32 memory directly

	peers []*peer   // by rank; nil at c.rank
	shm   *shmGroup // shared memory with every rank, or nil (TCP only); set by Init
	// bell is shm's doorbell, for goroutines that wake its waiters; bellMu
	// keeps it mapped while one rings it (fail may run on any goroutine,
	// also after Close has stopped the communicator's own).
	bellMu sync.RWMutex
	bell   *uint32

	callMu sync.Mutex // held by the running collective (and by Close while it stops goroutines)
	seq    uint32
	cur    call      // the running collective, as frame headers name it
	left   int64     // when the last call returned (Unix nanoseconds), for LastCall
	tmp    []float32 // received segment before reduction
	acc    []float32 // partial reduction of the own chunk (Mesh, in place)
	work   []float32 // ReduceScatter copy of the send buffer (Ring)

	curOp     atomic.Int32 // opCode of the running collective, -1 between calls
	waitingOn atomic.Int32 // the rank recv is blocked on, -1 if none; sent in heartbeats
	failMu    sync.Mutex
	failure   error  // the first failure; never reset
	failedIn  string // the collective running when it happened
	broken    chan struct{}
	isBroken  atomic.Bool

	closeOnce sync.Once
	closing   atomic.Bool
	stop      chan struct{} // stops the background goroutines
	wg        sync.WaitGroup
}

// peer is the connection pair to one other rank.
type peer struct {
	rank int
	addr string
	data net.Conn // collective frames, both directions
	ctrl net.Conn // heartbeats, abort notices and goodbyes

	// Frames to send, written by the sender goroutine in order. posted is
	// owned by the collective; done counts frames written (or dropped after a
	// failure) and doneSig wakes a collective waiting for them.
	sendq   chan sendReq
	posted  uint64
	done    atomic.Uint64
	doneSig chan struct{}

	// Owned by the sender goroutine.
	whdr     [headerLen]byte
	warr     [2][]byte
	wv       net.Buffers
	wscratch []byte

	// Owned by the running collective.
	rhdr     [headerLen]byte
	rscratch []byte

	ctrlMu  sync.Mutex // serializes control writes
	ctrlBuf [headerLen]byte

	// What the peer's heartbeats say: when it was last heard of, and the
	// rank it was waiting for (-1: none).
	heard   atomic.Int64 // unix nanoseconds
	waitsOn atomic.Int32

	// What the control connection said about the peer's end.
	stateMu  sync.Mutex
	state    peerState
	resolved chan struct{} // closed when state leaves stateOpen
}

type peerState uint8

const (
	stateOpen    peerState = iota
	stateLost              // control connection closed without goodbye: the process died
	stateLeft              // goodbye received: the peer called Close
	stateAborted           // abort notice received
)

type sendReq struct {
	h    header
	data []float32
}

// call identifies one collective call in frame headers.
type call struct {
	op    opCode
	seq   uint32
	count uint64
	extra uint32

	// Wall-clock instants (Unix nanoseconds) of the call, for LastCall:
	// when this rank entered it, the latest entry of a peer it waited for
	// through shared memory and the latest time such a peer had its data
	// staged, and when this rank had seen the data of every peer it waits
	// for.
	entered, peerEntered, peerStaged, ready int64
	stamped                                 bool // this rank's barrier stamps are published (stampEntry)
}

func newComm(cfg Config) *Comm {
	c := &Comm{
		cfg:       cfg,
		rank:      cfg.Rank,
		size:      cfg.Size,
		timeout:   cfg.Timeout,
		grace:     cfg.Timeout / 4,
		heartbeat: cfg.Timeout / 4,
		segElems:  cfg.SegmentBytes / 4,
		zeroCopy:  hostLittleEndian(),
		peers:     make([]*peer, cfg.Size),
		broken:    make(chan struct{}),
		stop:      make(chan struct{}),
	}
	c.curOp.Store(-1)
	c.waitingOn.Store(-1)
	return c
}

// start takes over the established connections and starts the sender,
// control reader and heartbeat goroutines.
func (c *Comm) start(links []link) {
	for r, l := range links {
		if r == c.rank {
			continue
		}
		p := &peer{
			rank:     r,
			addr:     c.cfg.Addrs[r],
			data:     l.data,
			ctrl:     l.ctrl,
			sendq:    make(chan sendReq, 4*maxSegments),
			doneSig:  make(chan struct{}, 1),
			resolved: make(chan struct{}),
		}
		p.heard.Store(time.Now().UnixNano())
		p.waitsOn.Store(-1)
		c.peers[r] = p
	}
	for _, p := range c.peers {
		if p == nil {
			continue
		}
		c.wg.Add(2)
		go c.sendLoop(p)
		go c.ctrlLoop(p)
	}
	c.wg.Add(1)
	go c.heartbeatLoop()
}

// Rank returns this process's rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// Algorithm returns the reduction algorithm in use.
func (c *Comm) Algorithm() Algorithm { return c.cfg.Algorithm }

// Err returns the failure that broke the communicator, or nil.
func (c *Comm) Err() error {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	return c.failure
}

// Close tells the other ranks this one is leaving, closes every
// connection and stops every goroutine of the communicator. A collective
// running concurrently returns ErrClosed. Close always returns nil.
func (c *Comm) Close() error {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		// Goodbye first: a peer that sees the data connection close then
		// finds the reason on the control connection.
		for _, p := range c.peers {
			if p != nil {
				c.writeCtrl(p, kindGoodbye, nil)
			}
		}
		c.fail(ErrClosed)
		for _, p := range c.peers {
			if p != nil {
				p.ctrl.Close()
			}
		}
		c.callMu.Lock() // a running collective returns promptly: its connections are closed
		close(c.stop)
		c.wg.Wait()
		c.closeShm()
		c.callMu.Unlock()
	})
	return nil
}

// fail records the first failure, tells every peer about it (unless this
// rank is closing) and closes the data connections, which wakes every
// blocked read and write. It returns the first failure.
func (c *Comm) fail(cause error) error {
	c.failMu.Lock()
	if c.failure != nil {
		f := c.failure
		c.failMu.Unlock()
		return f
	}
	var pe *PeerError
	var ae *abortError
	if c.cfg.Members != nil && !errors.As(cause, &ae) && errors.As(cause, &pe) {
		pe.members = c.cfg.Members
	}
	c.failure = cause
	if op := c.curOp.Load(); op >= 0 {
		c.failedIn = opCode(op).String()
	}
	c.isBroken.Store(true)
	close(c.broken)
	c.failMu.Unlock()
	c.wakeShm()

	if !errors.Is(cause, ErrClosed) {
		notice := c.noticeFor(cause).encode()
		for _, p := range c.peers {
			if p != nil {
				c.writeCtrl(p, kindAbort, notice)
			}
		}
	}
	for _, p := range c.peers {
		if p != nil {
			p.data.Close()
		}
	}
	return cause
}

// noticeFor turns a failure into the abort notice peers receive.
func (c *Comm) noticeFor(cause error) abortNotice {
	var pe *PeerError
	var ae *abortError
	culprit := -1
	if errors.As(cause, &ae) {
		// Passed on from another communicator of this rank: name its
		// culprit if it is one of this communicator's ranks too, else
		// this rank.
		if errors.As(ae.cause, &pe) {
			culprit = c.memberIndex(pe.JobRank())
		}
	} else if errors.As(cause, &pe) {
		culprit = pe.Rank
	}
	if culprit < 0 {
		text := cause.Error()
		if ae != nil {
			text = relayedPrefix + text
		}
		return abortNotice{culprit: int32(c.rank), code: abortAborted, text: text}
	}
	a := abortNotice{culprit: int32(culprit), code: abortAborted}
	detail := pe.Err.Error()
	switch {
	case errors.Is(pe.Err, ErrPeerTimeout):
		a.code, a.timeout = abortTimeout, int64(c.timeout)
	case errors.Is(pe.Err, ErrPeerClosed):
		a.code = abortClosed
	case errors.Is(pe.Err, ErrPeerLeft):
		a.code = abortLeft
	case errors.Is(pe.Err, ErrOutOfStep):
		a.code, a.text = abortOutOfStp, trimSentinel(detail, ErrOutOfStep)
	case errors.Is(pe.Err, ErrProtocol):
		a.code, a.text = abortProtocol, trimSentinel(detail, ErrProtocol)
	case errors.Is(pe.Err, ErrPeerAborted):
		a.text = trimSentinel(detail, ErrPeerAborted)
	default:
		a.text = detail
	}
	return a
}

// memberIndex returns the rank of this communicator that is rank job of
// the job (Config.Members), or -1.
func (c *Comm) memberIndex(job int) int {
	if c.cfg.Members == nil {
		if job < 0 || job >= c.size {
			return -1
		}
		return job
	}
	return slices.Index(c.cfg.Members, job)
}

// trimSentinel removes the "sentinel: " prefix a detail was wrapped with,
// so the receiver can wrap it again without repeating it.
func trimSentinel(s string, sentinel error) string {
	p := sentinel.Error() + ": "
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// noticeError is the failure an abort notice from rank via describes.
func (c *Comm) noticeError(a abortNotice, via int) *PeerError {
	pe := &PeerError{Rank: int(a.culprit), Addr: c.cfg.Addrs[a.culprit], Via: via}
	if pe.Rank == via {
		pe.Via = -1
	}
	switch a.code {
	case abortClosed:
		pe.Err = ErrPeerClosed
	case abortLeft:
		pe.Err = ErrPeerLeft
	case abortTimeout:
		pe.Err = fmt.Errorf("%w within %v", ErrPeerTimeout, time.Duration(a.timeout))
	case abortOutOfStp:
		pe.Err = fmt.Errorf("%w: %s", ErrOutOfStep, a.text)
	case abortProtocol:
		pe.Err = fmt.Errorf("%w: %s", ErrProtocol, a.text)
	default:
		pe.Err = fmt.Errorf("%w: %s", ErrPeerAborted, a.text)
	}
	return pe
}

// failureFor is the error a collective returns when the communicator
// failed while it ran.
func (c *Comm) failureFor(op opCode) error {
	c.failMu.Lock()
	f := c.failure
	c.failMu.Unlock()
	var pe *PeerError
	switch {
	case errors.As(f, &pe):
		cp := *pe
		cp.Op = op.String()
		return &cp
	case errors.Is(f, ErrClosed):
		return fmt.Errorf("collective: %s: %w", op, ErrClosed)
	}
	return fmt.Errorf("collective: %s: %w", op, f)
}

// brokenErr is the error of a call made after a failure.
func (c *Comm) brokenErr(op opCode) error {
	c.failMu.Lock()
	f, during := c.failure, c.failedIn
	c.failMu.Unlock()
	if errors.Is(f, ErrClosed) {
		return fmt.Errorf("collective: %s: %w", op, ErrClosed)
	}
	return &brokenError{op: op.String(), during: during, cause: f}
}

// peerFailure attributes an I/O error on a connection to peer p, fails the
// communicator with it and returns the failure. A timeout may only be a
// symptom (p itself waits for a rank that hangs), so it blames the root of
// the wait-for chain. A closed connection may be explained by an abort
// notice or a goodbye on p's control connection, so it waits up to the
// grace period for the control connection to say how p ended.
func (c *Comm) peerFailure(p *peer, err error) error {
	if c.isBroken.Load() {
		return c.Err()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		q := c.rootOfWait(p)
		return c.fail(&PeerError{Rank: q.rank, Addr: q.addr, Err: fmt.Errorf("%w within %v", ErrPeerTimeout, c.timeout), Via: -1})
	}
	t := time.NewTimer(c.grace)
	select {
	case <-p.resolved:
	case <-c.broken:
	case <-t.C:
	}
	t.Stop()
	if c.isBroken.Load() {
		return c.Err()
	}
	reason := ErrPeerClosed
	if p.getState() == stateLeft {
		reason = ErrPeerLeft
	}
	return c.fail(&PeerError{Rank: p.rank, Addr: p.addr, Err: reason, Via: -1})
}

// rootOfWait follows the wait-for chain from p, a peer this rank waited
// on for the whole timeout: if p's heartbeats say it waits for rank q, q
// is the one to blame, unless q waits for someone else in turn, and so on.
// The chain ends at a rank that waits for nobody (it never called the
// collective, or is stuck elsewhere) or at a loop. Every rank of a stuck
// job thus names the same root.
//
// A rank on the chain whose heartbeats are late may be stopped (its last
// heartbeat is then stale) or merely slow; rootOfWait waits until its
// control connection either calls it silent, which fails the communicator
// with that rank as the cause, or hears from it again.
func (c *Comm) rootOfWait(p *peer) *peer {
	q, quiet := c.walkWaits(p)
	if !quiet {
		return q
	}
	wait := time.Until(time.Unix(0, q.heard.Load()).Add(c.timeout + c.heartbeat))
	t := time.NewTimer(max(wait, 0))
	defer t.Stop()
	select {
	case <-c.broken:
		return q
	case <-t.C:
	}
	q, _ = c.walkWaits(p)
	return q
}

// walkWaits returns the end of the wait-for chain from p, and whether the
// chain stopped at a rank not heard from for two heartbeat periods.
func (c *Comm) walkWaits(p *peer) (end *peer, quiet bool) {
	late := time.Now().Add(-2 * c.heartbeat).UnixNano()
	visited := make([]bool, c.size)
	visited[c.rank] = true
	q := p
	for {
		visited[q.rank] = true
		if q.heard.Load() < late {
			return q, true
		}
		w := int(q.waitsOn.Load())
		if w < 0 || w >= c.size || visited[w] {
			return q, false
		}
		q = c.peers[w]
	}
}

func (p *peer) setState(s peerState) {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	if p.state == stateOpen {
		p.state = s
		close(p.resolved)
	}
}

func (p *peer) getState() peerState {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	return p.state
}

// writeCtrl sends one control frame, best effort: a peer that cannot take
// it is detected by its own symptoms.
func (c *Comm) writeCtrl(p *peer, kind frameKind, payload []byte) {
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()
	h := header{kind: kind, nbytes: uint32(len(payload))}
	h.put(p.ctrlBuf[:])
	_ = p.ctrl.SetWriteDeadline(time.Now().Add(min(c.timeout, ctrlWriteLimit)))
	if len(payload) == 0 {
		_, _ = p.ctrl.Write(p.ctrlBuf[:])
		return
	}
	_, _ = p.ctrl.Write(append(p.ctrlBuf[:], payload...))
}

// writeHeartbeat tells p that this rank is alive and which rank, if any,
// it is waiting for (extra = rank+1, 0 for none).
func (c *Comm) writeHeartbeat(p *peer) {
	p.ctrlMu.Lock()
	defer p.ctrlMu.Unlock()
	h := header{kind: kindHeartbeat, extra: uint32(c.waitingOn.Load() + 1)}
	h.put(p.ctrlBuf[:])
	_ = p.ctrl.SetWriteDeadline(time.Now().Add(min(c.timeout, ctrlWriteLimit)))
	_, _ = p.ctrl.Write(p.ctrlBuf[:])
}

// heartbeatLoop tells every peer this rank is alive, four times per timeout.
func (c *Comm) heartbeatLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			for _, p := range c.peers {
				if p != nil {
					c.writeHeartbeat(p)
				}
			}
		}
	}
}

// ctrlLoop reads p's control connection: heartbeats keep p alive, silence
// for the timeout fails the communicator, an abort notice fails it with the
// cause p reports, and the end of the connection records how p left.
func (c *Comm) ctrlLoop(p *peer) {
	defer c.wg.Done()
	defer c.wakeShm() // a rank waiting in a shared-memory barrier re-checks p's state
	var hb [headerLen]byte
	// The peer starts its heartbeats when its own Init returns, which can
	// be up to its connect timeout after ours.
	wait := max(c.timeout, c.cfg.ConnectTimeout)
	for {
		_ = p.ctrl.SetReadDeadline(time.Now().Add(wait))
		wait = c.timeout
		if _, err := io.ReadFull(p.ctrl, hb[:]); err != nil {
			// A silent peer is a timeout: record it before marking the
			// peer lost, so nobody waiting on the peer's state (a
			// shared-memory barrier) takes it for a closed connection.
			var ne net.Error
			if !c.closing.Load() && errors.As(err, &ne) && ne.Timeout() {
				c.fail(&PeerError{Rank: p.rank, Addr: p.addr, Err: fmt.Errorf("%w within %v", ErrPeerTimeout, c.timeout), Via: -1})
			}
			p.setState(stateLost)
			return
		}
		p.heard.Store(time.Now().UnixNano())
		h := parseHeader(hb[:])
		switch {
		case h.kind == kindHeartbeat && h.nbytes == 0:
			p.waitsOn.Store(int32(h.extra) - 1)
		case h.kind == kindGoodbye && h.nbytes == 0:
			p.setState(stateLeft)
			return
		case h.kind == kindAbort && h.nbytes >= abortFixed && h.nbytes <= abortFixed+maxAbortText:
			buf := make([]byte, h.nbytes)
			if _, err := io.ReadFull(p.ctrl, buf); err != nil {
				p.setState(stateLost)
				return
			}
			// Record the cause before marking the peer resolved: a
			// collective that saw p's data connection close is waiting on
			// either, and must find the cause, not blame the messenger.
			a, err := decodeAbort(buf, c.size)
			if err != nil {
				c.fail(&PeerError{Rank: p.rank, Addr: p.addr, Err: err, Via: -1})
			} else {
				c.fail(c.noticeError(a, p.rank))
			}
			p.setState(stateAborted)
			return
		default:
			c.fail(&PeerError{Rank: p.rank, Addr: p.addr, Err: fmt.Errorf("%w: control frame of kind %d with %d bytes", ErrProtocol, h.kind, h.nbytes), Via: -1})
			p.setState(stateAborted)
			return
		}
	}
}

// sendLoop writes p's queued frames in order. After a failure it drops
// them (still counting them done) so the collective that queued them can
// return promptly.
func (c *Comm) sendLoop(p *peer) {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case req := <-p.sendq:
			if !c.isBroken.Load() {
				if err := c.writeFrame(p, &req); err != nil {
					c.peerFailure(p, err)
				}
			}
			p.done.Add(1)
			select {
			case p.doneSig <- struct{}{}:
			default:
			}
		}
	}
}

// writeFrame writes one data frame with a single writev (header and
// payload straight from the caller's memory) on little-endian hosts.
func (c *Comm) writeFrame(p *peer, req *sendReq) error {
	if err := p.data.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	req.h.put(p.whdr[:])
	if len(req.data) == 0 {
		_, err := p.data.Write(p.whdr[:])
		return err
	}
	if c.zeroCopy {
		p.warr[0], p.warr[1] = p.whdr[:], floatBytes(req.data)
		p.wv = p.warr[:]
		_, err := p.wv.WriteTo(p.data)
		p.warr[0], p.warr[1] = nil, nil // do not keep the caller's buffer alive
		return err
	}
	n := headerLen + 4*len(req.data)
	if cap(p.wscratch) < n {
		p.wscratch = make([]byte, n)
	}
	b := p.wscratch[:n]
	copy(b, p.whdr[:])
	encodeFloats(b[headerLen:], req.data)
	_, err := p.data.Write(b)
	return err
}

// run executes one collective: it refuses calls on a broken or busy
// communicator, numbers the call, arms the context, runs body and waits
// until every frame body queued has left. Any failure during the call
// breaks the communicator and is returned with the collective's name.
func (c *Comm) run(ctx context.Context, op opCode, count uint64, extra uint32, body func() error) error {
	if c.isBroken.Load() {
		return c.brokenErr(op)
	}
	if !c.callMu.TryLock() {
		return fmt.Errorf("collective: %s: %w", op, ErrBusy)
	}
	defer c.callMu.Unlock()
	if c.isBroken.Load() {
		return c.brokenErr(op)
	}
	c.seq++
	c.cur = call{op: op, seq: c.seq, count: count, extra: extra, entered: time.Now().UnixNano()}
	defer func() { c.left = time.Now().UnixNano() }()
	if c.shm != nil && !op.mayUseShm() {
		// Ranks waiting in a shared-memory barrier learn that this one
		// is in the same call over TCP (collectives that may use shared
		// memory say which path they take themselves).
		c.shm.announce(c.rank, c.current(noRegion, 0))
	}
	c.curOp.Store(int32(op))
	defer c.curOp.Store(-1)
	if err := ctx.Err(); err != nil {
		c.fail(err)
		return c.failureFor(op)
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { c.fail(context.Cause(ctx)) })
		defer stop()
	}
	var err error
	if c.shm != nil && c.shm.stg != nil {
		err = c.stageUpkeep()
	}
	if err == nil {
		err = body()
	}
	c.drain()
	if c.isBroken.Load() {
		return c.failureFor(op)
	}
	return err
}

// abortCall fails the communicator because this rank cannot take part in
// a collective (bad arguments), so the peers learn why instead of waiting
// for a timeout.
func (c *Comm) abortCall(op opCode, err error) error {
	if c.isBroken.Load() {
		return c.brokenErr(op)
	}
	c.fail(err)
	return c.failureFor(op)
}

// drain waits until every queued frame has been written or dropped.
func (c *Comm) drain() {
	for _, p := range c.peers {
		if p == nil {
			continue
		}
		for p.done.Load() < p.posted {
			<-p.doneSig
		}
	}
}

// post queues a frame for p. It fails only when the communicator is broken.
func (c *Comm) post(p *peer, phase uint16, offset int, data []float32) error {
	st := &c.cur
	req := sendReq{
		h: header{kind: kindData, op: st.op, phase: phase, seq: st.seq, count: st.count,
			offset: uint64(offset), nbytes: uint32(4 * len(data)), extra: st.extra},
		data: data,
	}
	select {
	case p.sendq <- req:
		p.posted++
		return nil
	case <-c.broken:
		return c.Err()
	}
}

// recv reads the next frame from p, which must be the one described, into dst.
func (c *Comm) recv(p *peer, phase uint16, offset int, dst []float32) error {
	st := &c.cur
	if err := p.data.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return c.peerFailure(p, err)
	}
	c.waitingOn.Store(int32(p.rank))
	defer c.waitingOn.Store(-1)
	if _, err := io.ReadFull(p.data, p.rhdr[:]); err != nil {
		return c.peerFailure(p, err)
	}
	want := header{kind: kindData, op: st.op, phase: phase, seq: st.seq, count: st.count,
		offset: uint64(offset), nbytes: uint32(4 * len(dst)), extra: st.extra}
	if got := parseHeader(p.rhdr[:]); got != want {
		return c.fail(c.unexpected(p, got, want))
	}
	if len(dst) == 0 {
		return nil
	}
	var err error
	if c.zeroCopy {
		_, err = io.ReadFull(p.data, floatBytes(dst))
	} else {
		n := 4 * len(dst)
		if cap(p.rscratch) < n {
			p.rscratch = make([]byte, n)
		}
		if _, err = io.ReadFull(p.data, p.rscratch[:n]); err == nil {
			decodeFloats(dst, p.rscratch[:n])
		}
	}
	if err != nil {
		return c.peerFailure(p, err)
	}
	return nil
}

// unexpected describes a frame that is not the one expected from p.
func (c *Comm) unexpected(p *peer, got, want header) *PeerError {
	pe := &PeerError{Rank: p.rank, Addr: p.addr, Via: -1}
	if got.kind == kindData && (got.op != want.op || got.seq != want.seq || got.count != want.count || got.extra != want.extra) {
		pe.Err = fmt.Errorf("%w: it called %s, rank %d called %s", ErrOutOfStep, got.describeCall(), c.rank, want.describeCall())
		return pe
	}
	if err := c.lengthMismatch(got, want); err != nil {
		pe.Err = err
		return pe
	}
	pe.Err = fmt.Errorf("%w: got kind %d phase %d offset %d with %d bytes, want kind %d phase %d offset %d with %d bytes",
		ErrProtocol, got.kind, got.phase, got.offset, got.nbytes, want.kind, want.phase, want.offset, want.nbytes)
	return pe
}
