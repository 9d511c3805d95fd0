package collective

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/mspipe/mspipe/npu/ranktable"
)

// Defaults for the zero values of Config fields.
const (
	// DefaultTimeout bounds every network wait when Config.Timeout is zero.
	DefaultTimeout = 30 * time.Second
	// DefaultSegmentBytes is the frame payload size large buffers are cut
	// into, so that ranks forward one segment while receiving the next.
	DefaultSegmentBytes = 1 << 20
	// DefaultSocketBuffer is the send and receive buffer size requested for
	// data connections when Config.SocketBuffer is zero.
	DefaultSocketBuffer = 1 << 20
	// DefaultBasePort is the port of rank 0 when ranks are placed from a
	// rank table; rank r listens on DefaultBasePort+r.
	DefaultBasePort = 29500
	// MinSecretBytes is the shortest accepted job secret.
	MinSecretBytes = 16
	// MinTimeout is the shortest accepted Config.Timeout.
	MinTimeout = 100 * time.Millisecond
)

// Op is the element-wise reduction of AllReduce and ReduceScatter.
type Op uint8

const (
	Sum  Op = iota // x0 + x1 + ... + xn-1
	Mean           // the Sum divided by the rank size (one float32 division)
	Max            // the largest element; NaN wins
	Min            // the smallest element; NaN wins
	Prod           // x0 * x1 * ... * xn-1
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	case Max:
		return "max"
	case Min:
		return "min"
	case Prod:
		return "prod"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

func (o Op) valid() bool { return o <= Prod }

// Algorithm selects how AllReduce, ReduceScatter and AllGather move data.
// Both move the same number of bytes per rank, 2(n-1)/n of the buffer for
// AllReduce, which is the minimum; they differ in the order of reduction.
type Algorithm uint8

const (
	// Mesh sends every chunk straight to the rank that owns it, which
	// reduces the n contributions in rank order 0, 1, ..., n-1, then sends
	// the result straight to every rank. Results equal a sequential
	// reduction in rank order, bit for bit. The default.
	Mesh Algorithm = iota
	// Ring passes partial results around the ring 0 → 1 → ... → n-1 → 0
	// (reduce-scatter, then all-gather). Chunk c is reduced in ring order
	// starting after its owner: x[c+1], x[c+2], ..., x[n-1], x[0], ..., x[c].
	Ring
)

func (a Algorithm) String() string {
	switch a {
	case Mesh:
		return "mesh"
	case Ring:
		return "ring"
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm returns the Algorithm named "mesh" or "ring".
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "mesh":
		return Mesh, nil
	case "ring":
		return Ring, nil
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want mesh or ring)", ErrConfig, s)
}

// Config describes one rank of a job.
type Config struct {
	// Rank is this process's rank, 0 <= Rank < Size.
	Rank, Size int
	// Addrs holds the host:port listen address of every rank, index = rank.
	// Hosts are IP literals; they must be loopback unless AllowRemote.
	Addrs []string
	// Secret is the per-job secret every rank shares (at least
	// MinSecretBytes). Connections prove knowledge of it with an HMAC
	// challenge-response; it never crosses the network.
	Secret []byte
	// Timeout bounds every network wait: a peer that sends nothing for this
	// long fails the job. Zero means DefaultTimeout.
	Timeout time.Duration
	// ConnectTimeout bounds Init, which retries connections until peers
	// come up. Zero means Timeout.
	ConnectTimeout time.Duration
	// Algorithm selects the reduction algorithm (default Mesh).
	Algorithm Algorithm
	// SegmentBytes is the frame payload size (default DefaultSegmentBytes,
	// a multiple of 4 between 1 KiB and 256 MiB).
	SegmentBytes int
	// SocketBuffer is the SO_SNDBUF and SO_RCVBUF size requested for data
	// connections (default DefaultSocketBuffer; the kernel doubles it and
	// caps it at net.core.wmem_max/rmem_max); -1 leaves the kernel's
	// autotuning on. A fixed size bounds kernel memory: Mesh lets up to n-1
	// peers queue data for one rank at a time, and autotuned windows then
	// grow to tcp_rmem's maximum (32 MiB here), enough for eight ranks to
	// push the host into TCP memory pressure, where it drops packets.
	SocketBuffer int
	// Listener, if set, is an open listener for Addrs[Rank] that Init uses
	// instead of listening itself (tests and launchers pass inherited
	// sockets this way). Init closes it when it returns.
	Listener net.Listener
	// Transport selects shared memory or TCP for collective data (default
	// TransportAuto: shared memory when every rank runs on this host).
	Transport Transport
	// Hosts, when set, gives the server of every rank (index = rank), as
	// the rank table's server_list does. Shared memory is then used within
	// each server and TCP between servers, as HCCL uses HCCS inside a
	// server and the network between servers (a multi-server job simulated
	// on one machine keeps that split). Unset means one server.
	Hosts []int
	// ShmDir is the tmpfs directory for shared-memory segments (default
	// DefaultShmDir).
	ShmDir string
	// AllowRemote permits non-loopback addresses, for real clusters (and
	// hosts simulated as network namespaces). On a single machine leave it
	// false: a rank table meant for hardware is then refused instead of
	// sending traffic to the network. Wildcard (0.0.0.0, ::), multicast
	// and broadcast addresses are refused either way.
	AllowRemote bool
	// Members, when set, gives each rank's number in the job this
	// communicator is a part of (see Sub): failures name peers by it.
	Members []int
}

// FromRankTable returns the Config of the given rank of the job a validated
// rank table describes: rank r listens on its ranktable.Rank.ListenIP (its
// device_ip, or its server's host_nic_ip when that is an address), port
// basePort+r (basePort 0 means DefaultBasePort), and Hosts says which
// server of the table each rank is on. Using the rank in the port
// keeps addresses unique even when device IPs repeat. Secret and timeouts are
// left for the caller to set.
func FromRankTable(t *ranktable.RankTable, rank, basePort int) (Config, error) {
	name := t.File()
	if name == "" {
		name = "rank table"
	}
	ranks, err := t.Ranks()
	if err != nil {
		return Config{}, fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
	}
	if basePort == 0 {
		basePort = DefaultBasePort
	}
	if len(ranks) == 0 {
		return Config{}, fmt.Errorf("%w: %s: no devices", ErrConfig, name)
	}
	if basePort < 1 || basePort+len(ranks)-1 > 65535 {
		return Config{}, fmt.Errorf("%w: %s: base port %d leaves no port for rank %d", ErrConfig, name, basePort, len(ranks)-1)
	}
	if rank < 0 || rank >= len(ranks) {
		return Config{}, fmt.Errorf("%w: %s: rank %d out of range 0-%d", ErrConfig, name, rank, len(ranks)-1)
	}
	addrs := make([]string, len(ranks))
	hosts := make([]int, len(ranks))
	for i, r := range ranks {
		hosts[i] = r.HostIndex
		if r.RankID != i {
			return Config{}, fmt.Errorf("%w: %s: rank ids are not 0-%d (rank_id %d missing)", ErrConfig, name, len(ranks)-1, i)
		}
		ip, err := netip.ParseAddr(r.ListenIP())
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s: rank %d: address %q is not an IP address", ErrConfig, name, i, r.ListenIP())
		}
		addrs[i] = netip.AddrPortFrom(ip, uint16(basePort+i)).String()
	}
	return Config{Rank: rank, Size: len(ranks), Addrs: addrs, Hosts: hosts}, nil
}

// NewSecret returns a fresh random job secret for Config.Secret.
func NewSecret() ([]byte, error) {
	s := make([]byte, 32)
	if _, err := rand.Read(s); err != nil {
		return nil, fmt.Errorf("collective: new secret: %w", err)
	}
	return s, nil
}

// Validate reports the first problem of c, wrapping ErrConfig.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("collective: config: %w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if c.Size < 1 {
		return bad("rank size %d, want at least 1", c.Size)
	}
	if c.Rank < 0 || c.Rank >= c.Size {
		return bad("rank %d out of range 0-%d", c.Rank, c.Size-1)
	}
	if len(c.Addrs) != c.Size {
		return bad("%d addresses for %d ranks", len(c.Addrs), c.Size)
	}
	seen := make(map[netip.AddrPort]int, len(c.Addrs))
	for i, a := range c.Addrs {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			return bad("addrs[%d] %q: want ip:port with an IP literal", i, a)
		}
		if ap.Port() == 0 {
			return bad("addrs[%d] %q: port 0", i, a)
		}
		// A rank listens on its own address only: a wildcard would accept
		// connections on every interface of its host.
		if ip := ap.Addr(); ip.IsUnspecified() || ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return bad("addrs[%d] %q is not a unicast address of one rank", i, a)
		}
		if !c.AllowRemote && !ap.Addr().IsLoopback() {
			return bad("addrs[%d] %q is not a loopback address (set AllowRemote to use a real network)", i, a)
		}
		if j, dup := seen[ap]; dup {
			return bad("addrs[%d] %q repeats addrs[%d]", i, a, j)
		}
		seen[ap] = i
	}
	if len(c.Secret) < MinSecretBytes {
		return bad("secret of %d bytes, want at least %d", len(c.Secret), MinSecretBytes)
	}
	if c.Timeout != 0 && c.Timeout < MinTimeout {
		return bad("timeout %v, want at least %v", c.Timeout, MinTimeout)
	}
	if c.ConnectTimeout != 0 && c.ConnectTimeout < MinTimeout {
		return bad("connect timeout %v, want at least %v", c.ConnectTimeout, MinTimeout)
	}
	if c.Algorithm > Ring {
		return bad("unknown %v", c.Algorithm)
	}
	if c.Transport > TransportShm {
		return bad("unknown %v", c.Transport)
	}
	if c.Members != nil && len(c.Members) != c.Size {
		return bad("%d members for %d ranks", len(c.Members), c.Size)
	}
	if c.Hosts != nil && len(c.Hosts) != c.Size {
		return bad("%d hosts for %d ranks", len(c.Hosts), c.Size)
	}
	if s := c.SegmentBytes; s != 0 && (s < 1024 || s > 256<<20 || s%4 != 0) {
		return bad("segment size %d, want a multiple of 4 from 1024 to %d", s, 256<<20)
	}
	if s := c.SocketBuffer; s < -1 || s > 1<<30 || (s > 0 && s < 4096) {
		return bad("socket buffer %d, want -1, 0 or 4096 to %d bytes", s, 1<<30)
	}
	return nil
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = c.Timeout
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	if c.ShmDir == "" {
		c.ShmDir = DefaultShmDir
	}
	return c
}
