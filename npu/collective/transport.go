package collective

import "fmt"

// Transport selects how ranks exchange the data of collectives.
type Transport uint8

const (
	// TransportAuto uses shared memory when every rank runs on this host
	// (Init checks that they all map the same segment) and TCP otherwise.
	TransportAuto Transport = iota
	// TransportTCP sends all data over the TCP connections.
	TransportTCP
	// TransportShm requires shared memory: Init fails unless every rank
	// can use it. Comm.Transport reports it when shared memory is in use.
	TransportShm
)

func (t Transport) String() string {
	switch t {
	case TransportAuto:
		return "auto"
	case TransportTCP:
		return "tcp"
	case TransportShm:
		return "shm"
	}
	return fmt.Sprintf("Transport(%d)", uint8(t))
}

// ParseTransport parses "auto", "tcp" or "shm".
func ParseTransport(s string) (Transport, error) {
	for _, t := range []Transport{TransportAuto, TransportTCP, TransportShm} {
		if s == t.String() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown transport %q (want auto, tcp or shm)", ErrConfig, s)
}

// Transport returns the transport in use: TransportShm or TransportTCP.
func (c *Comm) Transport() Transport {
	if c.shm != nil {
		return TransportShm
	}
	return TransportTCP
}
