package collective

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Sub returns the configuration of this rank in a communicator over some
// of c's ranks (members, in the order that numbers them 0, 1, ...), as a
// pipeline's stage groups and neighbour pairs use one beside the job's: a
// collective there involves only the members, so groups run different
// call sequences at the same time. Member m listens on member m's address
// in c with the port moved up by portShift; a communicator of the same
// job that uses another shift, or c itself (shift 0), never shares a port
// with it as long as the shifts differ by at least c.Size. Failures name
// peers by their rank in c (Config.Members). It fails unless c.Rank is a
// member.
func (c Config) Sub(members []int, portShift int) (Config, error) {
	me := slices.Index(members, c.Rank)
	if me < 0 {
		return Config{}, fmt.Errorf("collective: sub-communicator %v: %w: rank %d is not a member", members, ErrConfig, c.Rank)
	}
	s := c
	s.Rank, s.Size, s.Listener = me, len(members), nil
	s.Addrs, s.Hosts, s.Members = make([]string, len(members)), nil, slices.Clone(members)
	if c.Hosts != nil {
		s.Hosts = make([]int, len(members))
	}
	for m, r := range members {
		if r < 0 || r >= c.Size || slices.Index(members, r) != m {
			return Config{}, fmt.Errorf("collective: sub-communicator %v: %w: rank %d is not one distinct rank of %d", members, ErrConfig, r, c.Size)
		}
		ap, err := netip.ParseAddrPort(c.Addrs[r])
		if err != nil {
			return Config{}, fmt.Errorf("collective: sub-communicator: %w: addrs[%d] %q", ErrConfig, r, c.Addrs[r])
		}
		port := int(ap.Port()) + portShift
		if port < 1 || port > 65535 {
			return Config{}, fmt.Errorf("collective: sub-communicator: %w: rank %d's port %d moved by %d leaves the port range", ErrConfig, r, ap.Port(), portShift)
		}
		s.Addrs[m] = netip.AddrPortFrom(ap.Addr(), uint16(port)).String()
		if c.Hosts != nil {
			s.Hosts[m] = c.Hosts[r]
		}
	}
	return s, nil
}

// SendRecv sends send to the other rank of a communicator of two ranks and
// receives recv from it, in one call: the point-to-point transfer between
// neighbouring pipeline stages. Either buffer may be empty; the peer's
// send must have len(recv) elements (a mismatch fails both with
// ErrOutOfStep, naming the sender), and both ranks call SendRecv the same
// number of times. It is Exchange between two ranks, with the same
// failure semantics: a dead or silent peer is named within the timeout.
func (c *Comm) SendRecv(ctx context.Context, send, recv []float32) error {
	if c.size != 2 {
		return c.abortCall(opExchange, fmt.Errorf("%w: SendRecv on a communicator of %d ranks, want 2", ErrBuffer, c.size))
	}
	var s, r [2][]float32
	s[1-c.rank], r[1-c.rank] = send, recv
	return c.Exchange(ctx, s[:], r[:])
}

// Broken is closed when the communicator fails or closes (Err then says
// why): a rank that holds several communicators watches it to fail the
// others at once.
func (c *Comm) Broken() <-chan struct{} { return c.broken }

// Abort fails the communicator because of cause, a failure elsewhere (on
// another communicator of the same rank): a call running now and every
// later one returns an error that carries cause's text, and the peers
// are told, naming this rank and cause. It does nothing on a communicator
// already broken or closed.
func (c *Comm) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted")
	}
	c.fail(&abortError{cause: cause})
}

// relayedPrefix starts the text of an abort notice that passes on a
// failure of another communicator, one the sender did not cause.
const relayedPrefix = "passed on: "

// Relayed reports whether err is a peer's abort that passed on a failure
// of another of its communicators (Abort) naming no rank of this one: the
// peer is no culprit, it only reported one this rank cannot name.
func Relayed(err error) bool {
	var pe *PeerError
	return errors.As(err, &pe) && errors.Is(pe.Err, ErrPeerAborted) && strings.Contains(pe.Err.Error(), relayedPrefix)
}

// abortError is a failure passed on from another communicator. A
// *PeerError it wraps numbers its culprit in the other communicator, so
// the abort notice to this one's peers names this rank (noticeFor).
type abortError struct{ cause error }

func (e *abortError) Error() string { return e.cause.Error() }
func (e *abortError) Unwrap() error { return e.cause }
