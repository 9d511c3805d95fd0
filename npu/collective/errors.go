package collective

import (
	"errors"
	"strconv"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrConfig reports a Config that describes no usable communicator.
	ErrConfig = errors.New("invalid configuration")

	// ErrAuth reports a peer that does not hold the job secret, or a job
	// secret that differs between two ranks of the same job.
	ErrAuth = errors.New("job secret differs")

	// ErrMismatch reports two ranks that disagree about the job: rank size,
	// address list (rank table, base port) or protocol version.
	ErrMismatch = errors.New("job configuration differs")

	// ErrPeerClosed reports a peer whose connection closed or reset without
	// an explanation: its process died or its host went away.
	ErrPeerClosed = errors.New("closed the connection")

	// ErrPeerLeft reports a peer that closed its communicator (Close) while
	// this rank still needed it.
	ErrPeerLeft = errors.New("closed the communicator")

	// ErrPeerTimeout reports a peer that sent nothing for the configured
	// timeout: it hangs, is stopped, or never called the collective.
	ErrPeerTimeout = errors.New("did not answer")

	// ErrPeerAborted reports a peer that gave up on its own, for example
	// because its context was canceled; the reason follows.
	ErrPeerAborted = errors.New("aborted")

	// ErrOutOfStep reports a peer that called a different collective, or the
	// same one with a different buffer length, reduce operation or root.
	ErrOutOfStep = errors.New("is out of step")

	// ErrProtocol reports a peer that sent bytes this protocol cannot parse.
	ErrProtocol = errors.New("sent a malformed frame")

	// ErrBroken is returned by every call after a failure: the ranks no
	// longer agree on where they are in the protocol, so the communicator
	// cannot be used again. The error also wraps the original cause.
	ErrBroken = errors.New("communicator broken")

	// ErrClosed is returned by calls on a communicator after Close.
	ErrClosed = errors.New("communicator closed")

	// ErrBusy reports a collective called while another one is running on
	// the same communicator. Collectives must be called in the same order on
	// every rank, which concurrent calls cannot guarantee.
	ErrBusy = errors.New("another collective is in progress on this communicator")

	// ErrBuffer reports buffers whose lengths do not fit the collective.
	ErrBuffer = errors.New("invalid buffer length")
)

// PeerError is a failure attributed to one rank of the job. Every rank that
// fails because of the same peer names that peer, including ranks that only
// learned about it from another rank (Via).
type PeerError struct {
	// Op is the collective that failed ("allreduce", "init", ...); empty
	// when the failure was noticed between calls.
	Op string
	// Rank and Addr identify the peer at fault.
	Rank int
	Addr string
	// Err says what happened; it wraps one of ErrPeerClosed, ErrPeerLeft,
	// ErrPeerTimeout, ErrPeerAborted, ErrOutOfStep, ErrProtocol, ErrAuth or
	// ErrMismatch.
	Err error
	// Via is the rank that observed the failure and reported it to this
	// one, or -1 if this rank observed it itself.
	Via int
	// members numbers the ranks of a sub-communicator in its job
	// (Config.Members) in the message; Rank and Via stay indices in the
	// communicator.
	members []int
}

// Error returns a line such as
// "collective: allreduce: rank 3 (127.1.0.4:29503) closed the connection".
func (e *PeerError) Error() string {
	s := "collective: "
	if e.Op != "" {
		s += e.Op + ": "
	}
	return s + e.describe()
}

// describe is the message without the "collective: op: " prefix.
func (e *PeerError) describe() string {
	s := "rank " + e.name(e.Rank) + " (" + e.Addr + ") " + e.Err.Error()
	if e.Via >= 0 {
		s += " (reported by rank " + e.name(e.Via) + ")"
	}
	return s
}

func (e *PeerError) Unwrap() error { return e.Err }

// JobRank is the culprit's rank in the job: Rank, or its job rank in a
// sub-communicator (Config.Members).
func (e *PeerError) JobRank() int {
	if e.Rank >= 0 && e.Rank < len(e.members) {
		return e.members[e.Rank]
	}
	return e.Rank
}

// name is rank r of the communicator as the message names it.
func (e *PeerError) name(r int) string {
	if r >= 0 && r < len(e.members) {
		return strconv.Itoa(e.members[r])
	}
	return strconv.Itoa(r)
}

// brokenError is returned by calls on a communicator that failed earlier.
type brokenError struct {
	op     string // the call being refused
	during string // the call that failed, "" if the failure came between calls
	cause  error
}

func (e *brokenError) Error() string {
	s := "collective: " + e.op + ": " + ErrBroken.Error() + " by an earlier failure"
	if e.during != "" {
		s += " in " + e.during
	}
	var pe *PeerError
	if errors.As(e.cause, &pe) {
		return s + ": " + pe.describe()
	}
	return s + ": " + e.cause.Error()
}

func (e *brokenError) Unwrap() []error { return []error{ErrBroken, e.cause} }
