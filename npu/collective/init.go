package collective

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// link is the established connection pair to one peer.
type link struct{ data, ctrl net.Conn }

// connEvent is the outcome of one dial or one accepted connection.
type connEvent struct {
	rank int
	kind connKind
	conn net.Conn
	rej  *rejection
	err  error
}

// Init connects this rank to every other rank of the job and returns the
// communicator. Each rank listens on its address; rank j dials every rank
// i < j twice (a data and a control connection) and retries refused
// connections until cfg.ConnectTimeout, because peers start at different
// times. Every connection is authenticated with the job secret and checked
// for the same rank size and address list. Connections that fail the
// secret check are refused and Init goes on waiting for the real rank;
// a peer that holds the secret but disagrees about the job fails Init on
// both sides. ctx cancels Init; it does not bound the communicator.
func Init(ctx context.Context, cfg Config) (*Comm, error) {
	if err := cfg.Validate(); err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Addrs = append([]string(nil), cfg.Addrs...)
	cfg.Secret = append([]byte(nil), cfg.Secret...)
	cfg.Hosts = append([]int(nil), cfg.Hosts...)
	if cfg.Members != nil {
		cfg.Members = append([]int(nil), cfg.Members...)
	}
	c := newComm(cfg)
	if cfg.Size == 1 {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		cfg.Listener = nil
		return c, nil
	}
	links, err := connect(ctx, &cfg)
	cfg.Listener = nil
	c.cfg.Listener = nil
	if err != nil {
		return nil, err
	}
	c.start(links)
	if cfg.Transport != TransportTCP {
		if err := c.setupShm(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// connector holds the state of one Init.
type connector struct {
	cfg      *Config
	hs       *handshaker
	ctx      context.Context
	deadline time.Time
	events   chan connEvent
	wg       sync.WaitGroup

	mu       sync.Mutex
	inflight map[net.Conn]bool // accepted connections still in their handshake
	dialErr  map[int]error     // last error dialing each lower rank
}

func connect(parent context.Context, cfg *Config) ([]link, error) {
	start := time.Now()
	deadline := start.Add(cfg.ConnectTimeout)
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()

	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Addrs[cfg.Rank]); err != nil {
			return nil, fmt.Errorf("collective: init: listen on %s: %w", cfg.Addrs[cfg.Rank], err)
		}
	}
	k := &connector{
		cfg: cfg, hs: newHandshaker(cfg), ctx: ctx, deadline: deadline,
		events:   make(chan connEvent),
		inflight: make(map[net.Conn]bool),
		dialErr:  make(map[int]error),
	}
	k.wg.Add(1)
	go k.acceptLoop(ln)
	for i := 0; i < cfg.Rank; i++ {
		for _, kind := range []connKind{connData, connCtrl} {
			k.wg.Add(1)
			go k.dial(i, kind)
		}
	}

	links := make([]link, cfg.Size)
	need := 2 * (cfg.Size - 1)
	var rejected []rejection
	var fatal error
	for need > 0 && fatal == nil {
		select {
		case ev := <-k.events:
			switch {
			case ev.err != nil:
				fatal = ev.err
			case ev.rej != nil:
				rejected = append(rejected, *ev.rej)
			default:
				slot := &links[ev.rank].data
				if ev.kind == connCtrl {
					slot = &links[ev.rank].ctrl
				}
				if *slot != nil {
					(*slot).Close() // the peer retried; its newer connection wins
				} else {
					need--
				}
				*slot = ev.conn
			}
		case <-ctx.Done():
			if parent.Err() != nil && !errors.Is(parent.Err(), context.DeadlineExceeded) {
				fatal = fmt.Errorf("collective: init: %w", parent.Err())
			} else {
				fatal = k.missing(links, time.Since(start), rejected)
			}
		}
	}

	// Stop accepting and dialing, abort handshakes in progress, and wait
	// for every goroutine of Init.
	cancel()
	ln.Close()
	k.mu.Lock()
	for conn := range k.inflight {
		conn.Close()
	}
	k.mu.Unlock()
	k.wg.Wait()

	if fatal != nil {
		for _, l := range links {
			for _, conn := range []net.Conn{l.data, l.ctrl} {
				if conn != nil {
					conn.Close()
				}
			}
		}
		return nil, fatal
	}
	for _, l := range links {
		for _, conn := range []net.Conn{l.data, l.ctrl} {
			if conn == nil {
				continue
			}
			_ = conn.SetDeadline(time.Time{})
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
		}
		if tc, ok := l.data.(*net.TCPConn); ok && cfg.SocketBuffer > 0 {
			_ = tc.SetReadBuffer(cfg.SocketBuffer)
			_ = tc.SetWriteBuffer(cfg.SocketBuffer)
		}
	}
	return links, nil
}

// deliver hands an event to connect, or closes its connection if Init is over.
func (k *connector) deliver(ev connEvent) {
	select {
	case k.events <- ev:
	case <-k.ctx.Done():
		if ev.conn != nil {
			ev.conn.Close()
		}
	}
}

func (k *connector) acceptLoop(ln net.Listener) {
	defer k.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		if k.ctx.Err() != nil {
			k.mu.Unlock()
			conn.Close()
			return
		}
		k.inflight[conn] = true
		k.mu.Unlock()
		k.wg.Add(1)
		go k.serve(conn)
	}
}

func (k *connector) serve(conn net.Conn) {
	defer k.wg.Done()
	_ = conn.SetDeadline(k.handshakeDeadline())
	rank, kind, rej, err := k.hs.server(conn)
	k.mu.Lock()
	delete(k.inflight, conn)
	k.mu.Unlock()
	if rej != nil || err != nil {
		conn.Close()
		k.deliver(connEvent{rej: rej, err: err})
		return
	}
	k.deliver(connEvent{rank: rank, kind: kind, conn: conn})
}

func (k *connector) handshakeDeadline() time.Time {
	d := time.Now().Add(k.cfg.Timeout)
	if d.After(k.deadline) {
		d = k.deadline
	}
	return d
}

// dial connects to lower rank target, retrying until Init's deadline.
func (k *connector) dial(target int, kind connKind) {
	defer k.wg.Done()
	addr := k.cfg.Addrs[target]
	backoff := 10 * time.Millisecond
	for {
		d := net.Dialer{Deadline: k.handshakeDeadline()}
		conn, err := d.DialContext(k.ctx, "tcp", addr)
		if err == nil {
			_ = conn.SetDeadline(k.handshakeDeadline())
			if err = k.hs.client(conn, target, kind); err == nil {
				k.deliver(connEvent{rank: target, kind: kind, conn: conn})
				return
			}
			conn.Close()
			if isFatal(err) {
				k.deliver(connEvent{err: err})
				return
			}
		}
		var pe *PeerError
		if errors.As(err, &pe) {
			err = pe.Err // the PeerError wrapper would repeat "collective: init: rank ..."
		}
		k.mu.Lock()
		k.dialErr[target] = err
		k.mu.Unlock()
		wait := time.NewTimer(backoff)
		select {
		case <-k.ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// missing describes the ranks Init still waits for when its time is up.
func (k *connector) missing(links []link, waited time.Duration, rejected []rejection) error {
	var ranks []int
	for r, l := range links {
		if r != k.cfg.Rank && (l.data == nil || l.ctrl == nil) {
			ranks = append(ranks, r)
		}
	}
	sort.Ints(ranks)
	first := ranks[0]
	var b strings.Builder
	fmt.Fprintf(&b, "%v", waited.Round(time.Millisecond))
	k.mu.Lock()
	dialErr := k.dialErr[first]
	k.mu.Unlock()
	switch {
	case dialErr != nil:
		b.WriteString(" (last attempt: " + dialErr.Error() + ")")
	case first > k.cfg.Rank && len(rejected) == 0:
		b.WriteString(" (it never connected)")
	}
	if len(ranks) > 1 {
		b.WriteString("; also missing: ")
		for i, r := range ranks[1:] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("rank " + strconv.Itoa(r) + " (" + k.cfg.Addrs[r] + ")")
		}
	}
	if len(rejected) > 0 {
		// Name the most telling refusal: one that reached the secret check
		// says more than a connection that broke off early.
		shown := rejected[len(rejected)-1]
		for _, r := range rejected {
			if r.authFailed {
				shown = r
			}
		}
		fmt.Fprintf(&b, "; refused %d connection(s) that did not prove the job secret, e.g. %s", len(rejected), shown)
	}
	return k.hs.peer(first, fmt.Errorf("%w within %s", ErrPeerTimeout, b.String()))
}
