package collective

// The shared-memory transport, the counterpart of HCCS inside an Ascend
// server: the ranks of one server read each other's buffers from
// Comm.Alloc directly instead of sending them over loopback TCP.
//
// Init creates, per server, a control segment (a tmpfs file that the
// server's first rank creates with a random nonce, every rank of the
// server maps, and the creator unlinks once all have it) holding a
// doorbell word and one slot per rank: the epoch of the last barrier the
// rank reached and a descriptor of the call it is in. Alloc gives every
// rank a buffer in a tmpfs file (its name carries the nonce) that every
// other rank of the server maps too; the files are unlinked as soon as
// everyone has mapped them, so nothing is left behind however the
// processes end.
//
// The collectives on that memory, and their reduction kernels, are in
// shm_reduce.go.
//
// Barriers wait on the doorbell with a futex, in slices, checking between
// slices what the TCP control connections say: a rank that died or
// aborted fails the wait at once with the usual *PeerError, and a rank
// that does not arrive within the timeout is blamed as over TCP.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"
)

// DefaultShmDir is where shared-memory segments are created.
const DefaultShmDir = "/dev/shm"

const (
	shmSlot     = 128 // bytes per rank in the control segment: arrive word and entry stamp, then the descriptor on its own cache line
	shmDescOff  = 64
	shmNonceOff = 64 // in the segment's first slot, after the doorbell's cache line
	shmNonceLen = 16
	shmWaitStep = 20 * time.Millisecond // futex sleeps between checks of the control connections
	shmSpins    = 64                    // yields before the first futex sleep
)

// shmDesc describes the collective a rank is in; every rank must publish
// the same one. Collectives over TCP publish theirs too (region
// noRegion), so a rank waiting in a shared-memory barrier sees at once a
// peer that is in the same call over TCP.
type shmDesc struct {
	op, count, region, offset, extra uint64
	seq                              uint64 // descBusy while the fields change (announce)
}

// noRegion is the region of a call on ordinary memory.
const noRegion = ^uint64(0)

// allocFailed, as an Alloc descriptor's offset, says the rank could not
// get its shared buffer.
const allocFailed = ^uint64(0)

// maxAllocElems bounds Alloc (16 GiB of float32 per rank).
const maxAllocElems = 1 << 32

// shmGroup is this rank's view of the shared memory of its server: the
// ranks the rank table puts on the same server share memory, servers talk
// TCP.
type shmGroup struct {
	dir, tag string
	ctl      []byte
	bell     *uint32
	epoch    uint32
	nextID   uint32
	claimed  uint64 // pieces claimed by AllReduce calls so far (reduceClaimed)
	regions  []*shmRegion

	members []int // ranks on this server, ascending; members[0] leads
	local   int   // this rank's index in members
	// column holds the rank at index local of every server, in server
	// order (this rank among them, at colPos): the ranks that combine
	// their servers' partial results across servers. One server: just
	// this rank.
	column []int
	colPos int

	srcs, dsts [][]float32 // tensor.SumBroadcast's arguments
	acc        []float32   // portable reduction block

	stg *staging // staging memory for ordinary buffers (shm_staging.go), or nil; set under bellMu
}

// flat reports whether every rank of the job is on this server.
func (g *shmGroup) flat() bool { return len(g.column) == 1 }

// shmRegion is one Alloc: every rank's buffer, mapped here.
type shmRegion struct {
	id    uint32
	count int
	maps  [][]byte    // by rank
	views [][]float32 // maps as float32
}

// ShmTag returns the name tag of the shared-memory files of the job cfg
// belongs to (its secret and addresses): they are named mspipe-<tag>-*.
func ShmTag(cfg Config) string {
	h := sha256.New()
	h.Write([]byte("mspipe collective shm\x00"))
	h.Write(cfg.Secret)
	for _, a := range cfg.Addrs {
		h.Write([]byte("\x00" + a))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// RemoveShmLeftovers removes the shared-memory files of the job cfg
// belongs to from cfg.ShmDir. Ranks unlink them during Init and Alloc, so
// only a rank killed in between leaves one; a launcher calls this after
// its ranks have exited.
func RemoveShmLeftovers(cfg Config) error {
	dir := cfg.ShmDir
	if dir == "" {
		dir = DefaultShmDir
	}
	matches, err := filepath.Glob(filepath.Join(dir, "mspipe-"+ShmTag(cfg)+"-*"))
	if err != nil {
		return err
	}
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// Servers returns the number of servers the job's ranks are on
// (Config.Hosts; 1 when it is not set).
func (c *Comm) Servers() int {
	if c.cfg.Hosts == nil {
		return 1
	}
	seen := map[int]bool{}
	for _, h := range c.cfg.Hosts {
		seen[h] = true
	}
	return len(seen)
}

func pageRound(n int) int {
	p := os.Getpagesize()
	return (n + p - 1) / p * p
}

// setupShm decides the transport at the end of Init. The ranks of each
// server (Config.Hosts; all of them when it is not set) share a control
// segment: the server's first rank creates it, the others map it, and
// shared memory is used only if every rank of the job could, and every
// server has as many ranks (the ranks at one index of every server combine
// their servers' results).
func (c *Comm) setupShm(ctx context.Context) error {
	members, column, colPos, even := serverLayout(c.cfg.Hosts, c.size, c.rank)
	dir := c.cfg.ShmDir
	tag := ShmTag(c.cfg)
	path := filepath.Join(dir, "mspipe-"+tag+"-ctl")
	if len(column) > 1 {
		path = filepath.Join(dir, fmt.Sprintf("mspipe-%s-h%d-ctl", tag, c.cfg.Hosts[c.rank]))
	}
	leader := members[0]
	size := pageRound((c.size + 1) * shmSlot)
	var ctl []byte
	var mapErr error
	created := false
	if !shmSupported {
		mapErr = fmt.Errorf("not supported on %s", runtime.GOOS)
	} else if !even {
		mapErr = fmt.Errorf("the servers of the rank table have different numbers of ranks")
	} else if c.rank == leader {
		// The nonce tells this communicator's segment from any other's of
		// the same name, and makes its buffers' names unique.
		if ctl, mapErr = mapShared(path, size, true); mapErr == nil {
			created = true
			if _, err := rand.Read(ctl[shmNonceOff : shmNonceOff+shmNonceLen]); err != nil {
				mapErr = err
			}
		}
	}
	remove := func() {
		if created {
			_ = os.Remove(path)
			created = false
		}
	}
	if err := c.Barrier(ctx); err != nil {
		remove()
		c.dropCtl(ctl)
		return err
	}
	if c.rank != leader && mapErr == nil {
		ctl, mapErr = mapShared(path, size, false)
	}
	// Every rank says whether it mapped its server's segment and which
	// nonce it found there: shared memory only if all found their
	// leader's.
	mine := make([]float32, 1+shmNonceLen/4)
	if mapErr == nil {
		mine[0] = 1
		for i := range shmNonceLen / 4 {
			mine[1+i] = math.Float32frombits(binary.LittleEndian.Uint32(ctl[shmNonceOff+4*i:]))
		}
	}
	all := make([]float32, c.size*len(mine))
	err := c.AllGather(ctx, mine, all)
	if err == nil {
		err = c.Barrier(ctx) // every rank is done opening the file
	}
	remove()
	c.seq = 0 // the caller's first collective is call #1 on every rank, as without this setup
	if err != nil {
		c.dropCtl(ctl)
		return err
	}
	leaderOf := make(map[int]int) // host -> its first rank
	for r := c.size - 1; r >= 0; r-- {
		h := 0
		if c.cfg.Hosts != nil {
			h = c.cfg.Hosts[r]
		}
		leaderOf[h] = r
	}
	var missing []string
	for r := range c.size {
		got := all[r*len(mine) : (r+1)*len(mine)]
		h := 0
		if c.cfg.Hosts != nil {
			h = c.cfg.Hosts[r]
		}
		lead := leaderOf[h]
		ref := all[lead*len(mine) : (lead+1)*len(mine)]
		same := got[0] == 1
		for i := 1; same && i < len(mine); i++ {
			same = math.Float32bits(got[i]) == math.Float32bits(ref[i])
		}
		if !same {
			missing = append(missing, fmt.Sprint(r))
		}
	}
	if len(missing) > 0 {
		c.dropCtl(ctl)
		if c.cfg.Transport == TransportShm {
			why := ""
			if mapErr != nil {
				why = fmt.Sprintf(" (here: %v)", mapErr)
			}
			return fmt.Errorf("collective: init: %w: shared memory transport required, but rank(s) %s cannot map %s%s",
				ErrConfig, strings.Join(missing, ", "), path, why)
		}
		return nil
	}
	c.shm = &shmGroup{
		dir: dir, tag: tag + "-" + hex.EncodeToString(ctl[shmNonceOff:shmNonceOff+4]), ctl: ctl,
		bell:    (*uint32)(unsafe.Pointer(&ctl[0])),
		members: members, local: slices.Index(members, c.rank), column: column, colPos: colPos,
		srcs: make([][]float32, len(members)),
		dsts: make([][]float32, len(members)),
		acc:  make([]float32, shmFallback),
	}
	c.bellMu.Lock()
	c.bell = c.shm.bell
	c.bellMu.Unlock()
	return c.setupStaging()
}

// serverLayout returns, for rank of a job of size ranks on the servers
// hosts gives (nil: one server), the ranks on its server (ascending), the
// ranks at its index on every server (in server order) with its position
// among them, and whether every server has as many ranks.
func serverLayout(hosts []int, size, rank int) (members, column []int, colPos int, even bool) {
	if hosts == nil {
		members = make([]int, size)
		for r := range members {
			members[r] = r
		}
		return members, []int{rank}, 0, true
	}
	byHost := map[int][]int{}
	var order []int
	for r, h := range hosts {
		if _, ok := byHost[h]; !ok {
			order = append(order, h)
		}
		byHost[h] = append(byHost[h], r)
	}
	slices.Sort(order)
	members = byHost[hosts[rank]]
	local := slices.Index(members, rank)
	even = true
	for _, h := range order {
		ms := byHost[h]
		if len(ms) != len(members) {
			even = false
			continue
		}
		if h == hosts[rank] {
			colPos = len(column)
		}
		column = append(column, ms[local])
	}
	return members, column, colPos, even
}

// dropCtl unmaps ctl, if any.
func (c *Comm) dropCtl(ctl []byte) {
	if ctl != nil {
		unmap(ctl)
	}
}

func (g *shmGroup) arrive(r int) *uint32 {
	return (*uint32)(unsafe.Pointer(&g.ctl[(r+1)*shmSlot]))
}

func (g *shmGroup) desc(r int) *shmDesc {
	return (*shmDesc)(unsafe.Pointer(&g.ctl[(r+1)*shmSlot+shmDescOff]))
}

// announce publishes d as rank r's current call. Readers are other
// processes that may read at any moment, so it works as a sequence lock:
// the call number is first set to descBusy, then the fields are written,
// then the number.
func (g *shmGroup) announce(r int, d shmDesc) {
	p := g.desc(r)
	atomic.StoreUint64(&p.seq, descBusy)
	atomic.StoreUint64(&p.op, d.op)
	atomic.StoreUint64(&p.count, d.count)
	atomic.StoreUint64(&p.region, d.region)
	atomic.StoreUint64(&p.offset, d.offset)
	atomic.StoreUint64(&p.extra, d.extra)
	atomic.StoreUint64(&p.seq, d.seq)
}

// descBusy is the call number of a descriptor being written: it matches
// no call.
const descBusy = ^uint64(0)

// load reads rank r's current call. Its number is descBusy when r was
// announcing another call meanwhile, which a few tries did not get past:
// the fields read could belong to two calls, so they are not returned.
// (The number alone, read once before the fields, does not tell: r may
// have begun the next call's fields and not yet its number.) A number
// read twice unchanged means unchanged fields: a rank announces a call
// again only with the same fields, except Init's two steps, both call 0,
// which are read only between barriers.
func (g *shmGroup) load(r int) shmDesc {
	p := g.desc(r)
	for try := 0; try < 4; try++ {
		seq := atomic.LoadUint64(&p.seq)
		if seq == descBusy {
			runtime.Gosched()
			continue
		}
		d := shmDesc{
			op:     atomic.LoadUint64(&p.op),
			count:  atomic.LoadUint64(&p.count),
			region: atomic.LoadUint64(&p.region),
			offset: atomic.LoadUint64(&p.offset),
			extra:  atomic.LoadUint64(&p.extra),
			seq:    seq,
		}
		if atomic.LoadUint64(&p.seq) == seq {
			return d
		}
	}
	return shmDesc{seq: descBusy}
}

// current is the descriptor of the running call on region (noRegion for
// ordinary memory) at offset.
func (c *Comm) current(region uint64, offset int) shmDesc {
	return shmDesc{seq: uint64(c.cur.seq), op: uint64(c.cur.op), count: c.cur.count,
		region: region, offset: uint64(offset), extra: uint64(c.cur.extra)}
}

// outOfStep fails the communicator because rank q is in call d while this
// rank is in mine.
func (c *Comm) outOfStep(q int, d, mine shmDesc, self int) error {
	return c.fail(&PeerError{Rank: q, Addr: c.cfg.Addrs[q], Via: -1,
		Err: fmt.Errorf("%w: it called %s, rank %d called %s", ErrOutOfStep, d.describe(), self, mine.describe())})
}

// wakeShm wakes this host's ranks sleeping in a barrier, so that they look
// at the communicator's state again.
func (c *Comm) wakeShm() {
	c.bellMu.RLock()
	defer c.bellMu.RUnlock()
	if c.bell != nil {
		ring(c.bell)
		if c.shm.stg != nil {
			c.shm.stg.wake()
		}
	}
}

// shmBarrier returns once every rank has reached the same barrier. It
// fails when the communicator fails, when a peer's control connection
// ends, and when a peer does not arrive within the timeout.
func (c *Comm) shmBarrier() error {
	g := c.shm
	g.epoch++
	e := g.epoch
	c.stampEntry()
	atomic.StoreUint32(g.arrive(c.rank), e)
	ring(g.bell)
	deadline := time.Now().Add(c.timeout)
	defer c.waitingOn.Store(-1)
	for spin := 0; ; spin++ {
		b := atomic.LoadUint32(g.bell)
		missing := -1
		// Every member takes every barrier (they are only in calls that
		// all of them run on Alloc buffers, in Alloc and in Init), so the
		// epochs differ by one at most and the signed difference is right
		// however far they wrap; a later epoch is a rank already past this
		// barrier.
		for _, q := range g.members {
			if int32(atomic.LoadUint32(g.arrive(q))-e) < 0 {
				missing = q
				break
			}
		}
		if missing < 0 {
			c.sawBarrier()
			return nil
		}
		if c.isBroken.Load() {
			return c.Err()
		}
		p := c.peers[missing]
		c.waitingOn.Store(int32(missing))
		// A peer in this very call over TCP will never arrive here. (Other
		// disagreements show after the barrier, compared with rank 0.)
		if d := g.load(missing); d.region == noRegion && d.seq == uint64(c.cur.seq) {
			return c.outOfStep(missing, d, g.load(c.rank), c.rank)
		}
		select {
		case <-p.resolved:
			return c.peerFailure(p, errPeerGone)
		default:
		}
		now := time.Now()
		if now.After(deadline) {
			return c.peerFailure(p, os.ErrDeadlineExceeded)
		}
		if spin < shmSpins {
			runtime.Gosched()
			continue
		}
		futexWait(g.bell, b, min(shmWaitStep, deadline.Sub(now)))
	}
}

// errPeerGone stands for the end of a peer's connection seen from a
// shared-memory wait.
var errPeerGone = fmt.Errorf("peer connection ended")

// shmPublish publishes this rank's descriptor of the running call, waits
// for every rank and checks that all of them are in the same call as
// rank 0.
func (c *Comm) shmPublish(region uint32, offset int) error {
	g := c.shm
	g.announce(c.rank, c.current(uint64(region), offset))
	if err := c.shmBarrier(); err != nil {
		return err
	}
	// Everyone compares with the server's first rank, so every rank names
	// the same culprit. (Ranks of other servers are checked by the frames
	// of the TCP part.)
	lead := g.members[0]
	ref := g.load(lead)
	for _, q := range g.members[1:] {
		if d := g.load(q); d != ref {
			return c.outOfStep(q, d, ref, lead)
		}
	}
	return nil
}

func (d shmDesc) describe() string {
	h := header{kind: kindData, op: opCode(d.op), seq: uint32(d.seq), count: d.count, extra: uint32(d.extra)}
	s := h.describeCall()
	switch {
	case opCode(d.op) == opAlloc:
		return s
	case d.region == noRegion:
		return s + " on ordinary memory"
	}
	return fmt.Sprintf("%s on shared buffer %d at element %d", s, d.region, d.offset)
}

// Alloc returns a zeroed buffer of count elements for collectives that
// every rank on this host can read: AllReduce of a buffer from Alloc (or
// of a slice of one) moves no data through TCP. Alloc is a collective:
// every rank calls it in the same order with the same count. Without the
// shared-memory transport it returns ordinary memory.
//
// The buffer stays valid after Close (it becomes private memory of this
// process) and is never freed, so allocate long-lived buffers such as a
// model's gradients, not one per step.
func (c *Comm) Alloc(ctx context.Context, count int) ([]float32, error) {
	if count < 0 || count > maxAllocElems {
		return nil, fmt.Errorf("collective: alloc: %w: %d elements (want 0 to %d)", ErrBuffer, count, maxAllocElems)
	}
	if c.shm == nil || count == 0 {
		return make([]float32, count), nil
	}
	var out []float32
	err := c.run(ctx, opAlloc, uint64(count), 0, func() error {
		g := c.shm
		id := g.nextID
		g.nextID++
		size := pageRound(4 * count)
		name := func(r int) string {
			return filepath.Join(g.dir, fmt.Sprintf("mspipe-%s-r%d-b%d", g.tag, r, id))
		}
		reg := &shmRegion{id: id, count: count, maps: make([][]byte, c.size), views: make([][]float32, c.size)}
		own, ownErr := mapShared(name(c.rank), size, true)
		reg.maps[c.rank] = own
		defer func() {
			if ownErr == nil {
				_ = os.Remove(name(c.rank))
			}
			if out == nil || !g.owns(reg) {
				reg.unmapAll()
			}
		}()
		// Every rank says whether it got its buffer (offset allocFailed if
		// not); all of them then agree to share or to fall back.
		d := c.current(uint64(id), 0)
		if ownErr != nil {
			d.offset = allocFailed
		}
		g.announce(c.rank, d)
		if err := c.shmBarrier(); err != nil {
			return err
		}
		var failed []string
		ref := g.load(g.members[0])
		for _, q := range g.members {
			dq := g.load(q)
			if dq.offset == allocFailed {
				failed = append(failed, fmt.Sprint(q))
			}
			a, b := dq, ref
			a.offset, b.offset = 0, 0
			if a != b {
				return c.outOfStep(q, dq, ref, g.members[0])
			}
		}
		// Every server must decide alike: the column tells each rank what
		// the other servers found.
		elsewhere, err := c.columnAny(len(failed) > 0)
		if err != nil {
			return err
		}
		if len(failed) > 0 || elsewhere {
			why := ""
			if ownErr != nil {
				why = fmt.Sprintf(" (here: %v)", ownErr)
			}
			who := "rank(s) " + strings.Join(failed, ", ")
			if len(failed) == 0 {
				who = "ranks of another server"
			}
			if c.cfg.Transport == TransportShm {
				return c.fail(fmt.Errorf("alloc %d elements of shared memory: %s could not%s", count, who, why))
			}
			// Auto: ordinary memory on every rank, reduced over TCP, once
			// every rank has read the descriptors above (the next call's
			// would replace them).
			if err := c.shmBarrier(); err != nil {
				return err
			}
			out = make([]float32, count)
			return nil
		}
		for _, q := range g.members {
			if q == c.rank {
				continue
			}
			m, err := mapShared(name(q), size, false)
			if err != nil {
				return c.fail(fmt.Errorf("alloc: map the buffer of rank %d: %w", q, err))
			}
			reg.maps[q] = m
		}
		if err := c.shmBarrier(); err != nil { // every rank has mapped every buffer
			return err
		}
		for q, m := range reg.maps {
			if m != nil {
				reg.views[q] = unsafe.Slice((*float32)(unsafe.Pointer(&m[0])), count)
			}
		}
		g.regions = append(g.regions, reg)
		out = reg.views[c.rank]
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// columnAny tells the ranks of this rank's column (one per server) whether
// this server found a problem, and reports whether another did. With one
// server it sends nothing.
func (c *Comm) columnAny(here bool) (bool, error) {
	g := c.shm
	if g.flat() {
		return false, nil
	}
	flag := []float32{0}
	if here {
		flag[0] = 1
	}
	for _, p := range g.column {
		if p != c.rank {
			if err := c.post(c.peers[p], phaseDirect, 0, flag); err != nil {
				return false, err
			}
		}
	}
	any := false
	got := []float32{0}
	for _, p := range g.column {
		if p != c.rank {
			if err := c.recv(c.peers[p], phaseDirect, 0, got); err != nil {
				return false, err
			}
			any = any || got[0] != 0
		}
	}
	return any, nil
}

// owns reports whether reg is one of g's regions.
func (g *shmGroup) owns(reg *shmRegion) bool {
	for _, r := range g.regions {
		if r == reg {
			return true
		}
	}
	return false
}

// IsShared reports whether buf lies in shared memory from Alloc, so that
// AllReduce of it moves no data through TCP. Alloc falls back to ordinary
// memory (with TransportAuto) when a rank cannot get shared memory, such
// as when the tmpfs is full.
func (c *Comm) IsShared(buf []float32) bool {
	if !c.callMu.TryLock() {
		return false
	}
	defer c.callMu.Unlock()
	_, _, ok := c.shm.region(c.rank, buf)
	return ok
}

func (r *shmRegion) unmapAll() {
	for q, m := range r.maps {
		if m != nil {
			unmap(m)
			r.maps[q] = nil
		}
	}
}

// region returns the Alloc region buf lies in and buf's offset in it.
func (g *shmGroup) region(rank int, buf []float32) (*shmRegion, int, bool) {
	if g == nil || len(buf) == 0 {
		return nil, 0, false
	}
	a := uintptr(unsafe.Pointer(&buf[0]))
	for _, r := range g.regions {
		own := r.views[rank]
		base := uintptr(unsafe.Pointer(&own[0]))
		if a >= base && a < base+4*uintptr(len(own)) {
			off := int(a-base) / 4
			if off+len(buf) <= len(own) {
				return r, off, true
			}
		}
	}
	return nil, 0, false
}

// flatRegion is region for the collectives that use shared memory only
// when every rank is on this server (ReduceScatter, AllGather, Broadcast).
func (g *shmGroup) flatRegion(rank int, buf []float32) (*shmRegion, int, bool) {
	if g == nil || !g.flat() {
		return nil, 0, false
	}
	return g.region(rank, buf)
}

// announceTCP tells ranks waiting in a shared-memory barrier that this
// rank runs the current call over TCP.
func (c *Comm) announceTCP() {
	if c.shm != nil {
		c.shm.announce(c.rank, c.current(noRegion, 0))
	}
}

// closeShm releases the shared memory once no collective can run: peer
// buffers and the control segment are unmapped, and this rank's own
// buffers become private memory so slices of them stay valid.
func (c *Comm) closeShm() {
	g := c.shm
	if g == nil {
		return
	}
	for _, reg := range g.regions {
		for q, m := range reg.maps {
			if q == c.rank {
				if err := privatize(m); err != nil {
					continue // keep the shared mapping rather than break the caller's slice
				}
				reg.maps[q] = nil
				continue
			}
			unmap(m)
			reg.maps[q] = nil
		}
	}
	g.regions = nil
	c.bellMu.Lock()
	c.bell = nil
	if g.stg != nil {
		g.stg.close()
	}
	unmap(g.ctl)
	c.bellMu.Unlock()
	g.ctl = nil
}
