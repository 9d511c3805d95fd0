// Package collectivetest starts a job of communicating ranks inside one
// test process, for the tests of packages that compute with npu/collective
// (a split network, data-parallel training): each rank a goroutine with
// its own loopback listener, as mspipe's rank processes would be on one
// host.
//
//	comms := collectivetest.Group(t, 4, collective.TransportTCP)
//	// rank r calls comms[r].AllReduce from its own goroutine
//
// The communicators are closed when the test ends.
package collectivetest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
)

// timeout is each rank's collective.Config.Timeout: long enough for a
// loaded test machine, short enough that a hung test fails on its own.
const timeout = 30 * time.Second

// Group connects n ranks in this process with the given transport
// (TransportShm requires shared memory) and fails the test unless every
// rank came up using it. The ranks are closed at the test's cleanup.
func Group(t testing.TB, n int, transport collective.Transport) []*collective.Comm {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns[:i] {
				l.Close()
			}
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	secret, err := collective.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*collective.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[i], errs[i] = collective.Init(context.Background(), collective.Config{
				Rank: i, Size: n, Addrs: addrs, Secret: secret, Timeout: timeout, Listener: lns[i], Transport: transport,
			})
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
		if got := comms[i].Transport(); got != transport && transport != collective.TransportAuto {
			t.Fatalf("rank %d uses transport %v, want %v", i, got, transport)
		}
	}
	return comms
}
