package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// testSecret returns the job secret of the tests' jobs.
func testSecret() []byte { return []byte("mspipe-collective-test-secret-0123") }

// listeners opens n loopback listeners on free ports.
func listeners(t testing.TB, n int) ([]net.Listener, []string) {
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
	return lns, addrs
}

// configs returns the configurations of an n-rank job on fresh listeners;
// mod may change each rank's Config.
func configs(t testing.TB, n int, mod func(*Config)) []Config {
	t.Helper()
	lns, addrs := listeners(t, n)
	cfgs := make([]Config, n)
	for r := range cfgs {
		cfgs[r] = Config{Rank: r, Size: n, Addrs: addrs, Secret: testSecret(), Timeout: 5 * time.Second, Listener: lns[r]}
		if mod != nil {
			mod(&cfgs[r])
		}
	}
	return cfgs
}

// initAll runs Init for every config concurrently and returns the results.
func initAll(cfgs []Config) ([]*Comm, []error) {
	comms := make([]*Comm, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for r := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = Init(context.Background(), cfgs[r])
		}()
	}
	wg.Wait()
	return comms, errs
}

// group starts an n-rank job in this process and closes it at cleanup.
func group(t testing.TB, n int, mod func(*Config)) []*Comm {
	t.Helper()
	comms, errs := initAll(configs(t, n, mod))
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: init: %v", r, err)
		}
	}
	return comms
}

// onAll runs f for every rank concurrently and returns the errors by rank.
func onAll(comms []*Comm, f func(r int, c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r, c)
		}()
	}
	wg.Wait()
	return errs
}

func mustAll(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// value is element i of rank r's input for a seed: a counter-based hash
// (splitmix64) mapped to a float32 spread over many magnitudes, so that
// different reduction orders round differently. Prod gets values near one
// so products of eight ranks stay finite and non-zero. Random access lets
// references be computed without keeping every rank's buffer.
func value(seed uint64, r, i int, op Op) float32 {
	z := seed*0x9e3779b97f4a7c15 + uint64(r)<<40 + uint64(i)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	mant := uint32(z) & (1<<23 - 1)
	if op == Prod {
		return math.Float32frombits(uint32(127-4)<<23|mant) + 0.9375 // in [1, 1.0625)
	}
	exp := uint32(127 - 12 + (z>>32)%24)
	sign := uint32(z>>60) & 1
	return math.Float32frombits(sign<<31 | exp<<23 | mant)
}

// inputs returns the n input buffers of count elements for a seed.
func inputs(n, count int, op Op, seed uint64) [][]float32 {
	xs := make([][]float32, n)
	for r := range xs {
		xs[r] = make([]float32, count)
		fill(xs[r], seed, r, op)
	}
	return xs
}

func fill(buf []float32, seed uint64, r int, op Op) {
	for i := range buf {
		buf[i] = value(seed, r, i, op)
	}
}

func combine(op Op, a, b float32) float32 {
	switch op {
	case Prod:
		return a * b
	case Max:
		return max(a, b)
	case Min:
		return min(a, b)
	}
	return a + b
}

// rankOrderRef reduces xs sequentially in rank order, as one process would.
func rankOrderRef(xs [][]float32, op Op) []float32 {
	return orderRef(len(xs), len(xs[0]), op, rankOrder, func(r, i int) float32 { return xs[r][i] })
}

// ringRef reduces chunk c of xs in the order x(c+1), x(c+2), ..., x(c),
// the documented order of Ring, with AllReduce's chunk boundaries.
func ringRef(xs [][]float32, op Op) []float32 {
	return orderRef(len(xs), len(xs[0]), op, ringOrder, func(r, i int) float32 { return xs[r][i] })
}

// rankOrder and ringOrder give the rank whose element comes j-th
// (0 <= j < n) in the reduction of chunk c.
func rankOrder(n, c, j int) int { return j }
func ringOrder(n, c, j int) int { return (c + 1 + j) % n }

// orderRef reduces n ranks' elements one at a time in the given order.
func orderRef(n, count int, op Op, order func(n, c, j int) int, x func(r, i int) float32) []float32 {
	ref := make([]float32, count)
	lay := layout{count: count, n: n, seg: 1}
	for c := 0; c < n; c++ {
		o, l := lay.chunk(c)
		for i := o; i < o+l; i++ {
			acc := x(order(n, c, 0), i)
			for j := 1; j < n; j++ {
				acc = combine(op, acc, x(order(n, c, j), i))
			}
			if op == Mean {
				acc /= float32(n)
			}
			ref[i] = acc
		}
	}
	return ref
}

// sameBits reports the first index where a and b differ in bits, or -1.
func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// checkNoLeak fails if goroutines started after base do not end within a
// few seconds of Close.
func checkNoLeak(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines after close, %d before:\n%s", n, base, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantPeer checks that err is a *PeerError naming rank culprit with reason.
func wantPeer(t testing.TB, who string, err error, culprit int, reason error) {
	t.Helper()
	var pe *PeerError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: error %v (%T), want a PeerError naming rank %d", who, err, err, culprit)
	}
	if pe.Rank != culprit || !errors.Is(err, reason) {
		t.Fatalf("%s: error %q, want rank %d with %q", who, err, culprit, reason)
	}
	if want := fmt.Sprintf("rank %d (%s)", culprit, pe.Addr); !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: error %q does not contain %q", who, err, want)
	}
}
