package collective

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// The handshake authenticates both ends of every connection with the job
// secret and checks that they belong to the same job:
//
//	dialer → listener  hello     magic, version, kind, size, rank, target, topology, nonce
//	listener → dialer  challenge magic, version, size, rank, topology, nonce, HMAC("server", transcript)
//	dialer → listener  proof     status, HMAC("client", transcript)
//	listener → dialer  verdict   status
//
// The transcript is hello followed by the first 64 bytes of the challenge,
// so each MAC covers both fresh nonces and every claimed parameter: a
// recorded handshake cannot be replayed and a stray process without the
// secret learns nothing and is refused. The status fields let the side that
// found a problem tell the other, so both report it in the same words.
const (
	protocolVersion = 1
	helloLen        = 64
	challengeLen    = 96
	proofLen        = 40
	verdictLen      = 8
	nonceLen        = 32
)

const handshakeMagic = "MSCOLL"

// connKind tells the data connection of a pair from its control connection.
type connKind uint8

const (
	connData connKind = 1
	connCtrl connKind = 2
)

func (k connKind) String() string {
	if k == connCtrl {
		return "control"
	}
	return "data"
}

// Handshake status codes.
const (
	hsOK       uint8 = 0
	hsAuth     uint8 = 1 // the MAC did not verify
	hsSize     uint8 = 2 // rank sizes differ
	hsTopology uint8 = 3 // address lists differ
	hsRank     uint8 = 4 // the peer is not the rank expected
	hsKind     uint8 = 5 // unknown connection kind
)

// handshaker holds what one rank proves and checks in every handshake.
type handshaker struct {
	secret []byte
	rank   int
	size   int
	topo   [8]byte
	addrs  []string
}

func newHandshaker(cfg *Config) *handshaker {
	h := sha256.New()
	h.Write([]byte("mspipe collective topology\x00"))
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(cfg.Size))
	h.Write(n[:])
	for _, a := range cfg.Addrs {
		h.Write([]byte(a))
		h.Write([]byte{'\n'})
	}
	hs := &handshaker{secret: cfg.Secret, rank: cfg.Rank, size: cfg.Size, addrs: cfg.Addrs}
	copy(hs.topo[:], h.Sum(nil))
	return hs
}

// handshakeError is a failed handshake. Fatal errors mean the job is
// misconfigured (secret, size, addresses) and retrying cannot help; the
// others (I/O errors, a peer that restarted) are retried until the deadline.
type handshakeError struct {
	fatal bool
	err   error
}

func (e *handshakeError) Error() string { return e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

func (h *handshaker) mac(label string, transcript []byte) []byte {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte("mspipe collective " + label + "\x00"))
	m.Write(transcript)
	return m.Sum(nil)
}

func (h *handshaker) peer(rank int, err error) *PeerError {
	addr := "unknown address"
	if rank >= 0 && rank < len(h.addrs) {
		addr = h.addrs[rank]
	}
	return &PeerError{Op: opInit.String(), Rank: rank, Addr: addr, Err: err, Via: -1}
}

// statusError words a handshake status about peer rank (whose size is
// peerSize) as the predicate of a PeerError message.
func (h *handshaker) statusError(status uint8, peerSize int) error {
	switch status {
	case hsAuth:
		return fmt.Errorf("failed the secret check (%w)", ErrAuth)
	case hsSize:
		return fmt.Errorf("has rank size %d, this rank %d (%w)", peerSize, h.size, ErrMismatch)
	case hsTopology:
		return fmt.Errorf("has a different address list: rank table or base port differ (%w)", ErrMismatch)
	case hsRank:
		return fmt.Errorf("does not expect a connection from rank %d (%w)", h.rank, ErrMismatch)
	case hsKind:
		return fmt.Errorf("refused the connection kind (%w)", ErrMismatch)
	}
	return fmt.Errorf("%w: handshake status %d", ErrProtocol, status)
}

// client runs the dialer's side on conn, which should reach rank target.
func (h *handshaker) client(conn net.Conn, target int, kind connKind) error {
	var hello [helloLen]byte
	copy(hello[0:6], handshakeMagic)
	binary.LittleEndian.PutUint16(hello[6:], protocolVersion)
	hello[8] = byte(kind)
	binary.LittleEndian.PutUint32(hello[12:], uint32(h.size))
	binary.LittleEndian.PutUint32(hello[16:], uint32(h.rank))
	binary.LittleEndian.PutUint32(hello[20:], uint32(target))
	copy(hello[24:32], h.topo[:])
	if _, err := rand.Read(hello[32:64]); err != nil {
		return &handshakeError{fatal: true, err: fmt.Errorf("collective: init: nonce: %w", err)}
	}
	retry := func(err error) error {
		return &handshakeError{err: h.peer(target, fmt.Errorf("%w during the handshake (%w)", ErrPeerClosed, err))}
	}
	if _, err := conn.Write(hello[:]); err != nil {
		return retry(err)
	}
	var ch [challengeLen]byte
	if _, err := io.ReadFull(conn, ch[:]); err != nil {
		return retry(err)
	}
	if string(ch[0:6]) != handshakeMagic {
		return &handshakeError{fatal: true, err: h.peer(target, fmt.Errorf("%w: not an mspipe collective endpoint", ErrProtocol))}
	}
	if v := binary.LittleEndian.Uint16(ch[6:]); v != protocolVersion {
		return &handshakeError{fatal: true, err: h.peer(target, fmt.Errorf("speaks protocol version %d, this rank %d (%w)", v, protocolVersion, ErrMismatch))}
	}
	transcript := append(hello[:], ch[:64]...)
	status := hsOK
	peerSize := int(binary.LittleEndian.Uint32(ch[12:]))
	peerRank := int(binary.LittleEndian.Uint32(ch[16:]))
	switch {
	case !hmac.Equal(ch[64:96], h.mac("server", transcript)):
		status = hsAuth
	case peerSize != h.size:
		status = hsSize
	case [8]byte(ch[24:32]) != h.topo:
		status = hsTopology
	case peerRank != target:
		status = hsRank
	}
	var proof [proofLen]byte
	proof[0] = status
	copy(proof[8:], h.mac("client", transcript))
	if _, err := conn.Write(proof[:]); err != nil && status == hsOK {
		return retry(err)
	}
	if status != hsOK {
		err := h.statusError(status, peerSize)
		if status == hsRank {
			err = fmt.Errorf("answered as rank %d (%w)", peerRank, ErrMismatch)
		}
		return &handshakeError{fatal: true, err: h.peer(target, err)}
	}
	var verdict [verdictLen]byte
	if _, err := io.ReadFull(conn, verdict[:]); err != nil {
		return retry(err)
	}
	if verdict[0] != hsOK {
		err := h.statusError(verdict[0], peerSize)
		if verdict[0] == hsAuth {
			err = fmt.Errorf("refused this rank (%w)", ErrAuth)
		}
		return &handshakeError{fatal: true, err: h.peer(target, err)}
	}
	return nil
}

// rejection is a connection the listener refused without failing Init:
// it did not prove the secret, so it is no rank of this job.
type rejection struct {
	remote     string
	reason     string
	authFailed bool // it got as far as the secret check and failed it
}

func (r rejection) String() string { return r.remote + ": " + r.reason }

// server runs the listener's side on an accepted conn. It returns the
// peer's rank and connection kind, or a rejection (a stray connection;
// Init goes on), or a fatal error (a rank of this job that disagrees
// about the job; Init fails).
func (h *handshaker) server(conn net.Conn) (rank int, kind connKind, rej *rejection, err error) {
	remote := conn.RemoteAddr().String()
	reject := func(reason string) (int, connKind, *rejection, error) {
		return -1, 0, &rejection{remote: remote, reason: reason}, nil
	}
	var hello [helloLen]byte
	if _, err := io.ReadFull(conn, hello[:]); err != nil {
		return reject("no hello: " + err.Error())
	}
	if string(hello[0:6]) != handshakeMagic {
		return reject("not an mspipe collective client")
	}
	var ch [challengeLen]byte
	copy(ch[0:6], handshakeMagic)
	binary.LittleEndian.PutUint16(ch[6:], protocolVersion)
	binary.LittleEndian.PutUint32(ch[12:], uint32(h.size))
	binary.LittleEndian.PutUint32(ch[16:], uint32(h.rank))
	copy(ch[24:32], h.topo[:])
	if _, err := rand.Read(ch[32:64]); err != nil {
		return -1, 0, nil, fmt.Errorf("collective: init: nonce: %w", err)
	}
	transcript := append(hello[:], ch[:64]...)
	copy(ch[64:96], h.mac("server", transcript))
	if _, err := conn.Write(ch[:]); err != nil {
		return reject("write challenge: " + err.Error())
	}
	var proof [proofLen]byte
	if _, err := io.ReadFull(conn, proof[:]); err != nil {
		return reject("no proof: " + err.Error())
	}
	if !hmac.Equal(proof[8:40], h.mac("client", transcript)) {
		writeVerdict(conn, hsAuth)
		claimed := strconv.FormatUint(uint64(binary.LittleEndian.Uint32(hello[16:])), 10)
		return -1, 0, &rejection{remote: remote, reason: "failed the secret check (claimed rank " + claimed + ")", authFailed: true}, nil
	}
	// From here on the peer holds the secret: it is a rank of this job, and
	// any disagreement is a misconfigured job.
	peerSize := int(binary.LittleEndian.Uint32(hello[12:]))
	rank = int(binary.LittleEndian.Uint32(hello[16:]))
	target := int(binary.LittleEndian.Uint32(hello[20:]))
	kind = connKind(hello[8])
	if v := binary.LittleEndian.Uint16(hello[6:]); v != protocolVersion {
		return -1, 0, nil, h.peer(rank, fmt.Errorf("speaks protocol version %d, this rank %d (%w)", v, protocolVersion, ErrMismatch))
	}
	if proof[0] != hsOK {
		// The client found a problem in our answer and says which.
		err := h.statusError(proof[0], peerSize)
		if proof[0] == hsRank {
			err = fmt.Errorf("reached this rank while dialing rank %d (%w)", target, ErrMismatch)
		}
		return -1, 0, nil, h.peer(rank, err)
	}
	status := hsOK
	switch {
	case peerSize != h.size:
		status = hsSize
	case [8]byte(hello[24:32]) != h.topo:
		status = hsTopology
	case target != h.rank || rank <= h.rank || rank >= h.size:
		status = hsRank
	case kind != connData && kind != connCtrl:
		status = hsKind
	}
	writeVerdict(conn, status)
	if status != hsOK {
		err := h.statusError(status, peerSize)
		switch status {
		case hsRank:
			err = fmt.Errorf("dialed rank %d as rank %d, but only ranks %d-%d dial this one (%w)", target, rank, h.rank+1, h.size-1, ErrMismatch)
		case hsKind:
			err = fmt.Errorf("%w: unknown connection kind %d", ErrProtocol, kind)
		}
		return -1, 0, nil, h.peer(rank, err)
	}
	return rank, kind, nil, nil
}

func writeVerdict(conn net.Conn, status uint8) {
	var v [verdictLen]byte
	v[0] = status
	_, _ = conn.Write(v[:]) // best effort: the caller reports the problem itself
}

// isFatal reports whether a dial-side handshake error ends Init.
func isFatal(err error) bool {
	var he *handshakeError
	return errors.As(err, &he) && he.fatal
}
