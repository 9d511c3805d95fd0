package shard

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/collective"
)

// realComms connects n in-process ranks through npu/collective with the
// given transport.
func realComms(t *testing.T, n int, transport collective.Transport) []Comm {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	secret, err := collective.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]*collective.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cs[i], errs[i] = collective.Init(context.Background(), collective.Config{
				Rank: i, Size: n, Addrs: addrs, Secret: secret, Timeout: 30 * time.Second, Listener: lns[i], Transport: transport,
			})
		}(i)
	}
	wg.Wait()
	out := make([]Comm, n)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
		out[i] = cs[i]
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return out
}
