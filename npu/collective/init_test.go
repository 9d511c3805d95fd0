package collective

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/ranktable"
)

func TestValidate(t *testing.T) {
	good := Config{Rank: 1, Size: 2, Addrs: []string{"127.0.0.1:5000", "127.1.0.2:5001"}, Secret: testSecret()}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // "" means valid
	}{
		{"good", func(*Config) {}, ""},
		{"ipv6 loopback", func(c *Config) { c.Addrs[1] = "[::1]:5001" }, ""},
		{"size", func(c *Config) { c.Size = 0 }, "rank size 0, want at least 1"},
		{"rank", func(c *Config) { c.Rank = 2 }, "rank 2 out of range 0-1"},
		{"addr count", func(c *Config) { c.Addrs = c.Addrs[:1] }, "1 addresses for 2 ranks"},
		{"hostname", func(c *Config) { c.Addrs[0] = "localhost:5000" }, `addrs[0] "localhost:5000": want ip:port with an IP literal`},
		{"no port", func(c *Config) { c.Addrs[0] = "127.0.0.1" }, `addrs[0] "127.0.0.1": want ip:port`},
		{"port 0", func(c *Config) { c.Addrs[1] = "127.0.0.1:0" }, `addrs[1] "127.0.0.1:0": port 0`},
		{"remote", func(c *Config) { c.Addrs[1] = "192.2.27.6:5001" }, `addrs[1] "192.2.27.6:5001" is not a loopback address`},
		{"remote allowed", func(c *Config) { c.Addrs[1], c.AllowRemote = "192.2.27.6:5001", true }, ""},
		{"wildcard", func(c *Config) { c.Addrs[1], c.AllowRemote = "0.0.0.0:5001", true }, `addrs[1] "0.0.0.0:5001" is not a unicast address`},
		{"ipv6 wildcard", func(c *Config) { c.Addrs[0] = "[::]:5000" }, `addrs[0] "[::]:5000" is not a unicast address`},
		{"multicast", func(c *Config) { c.Addrs[1], c.AllowRemote = "224.0.0.1:5001", true }, `addrs[1] "224.0.0.1:5001" is not a unicast address`},
		{"duplicate", func(c *Config) { c.Addrs[1] = "127.0.0.1:5000" }, `addrs[1] "127.0.0.1:5000" repeats addrs[0]`},
		{"secret", func(c *Config) { c.Secret = []byte("short") }, "secret of 5 bytes, want at least 16"},
		{"timeout", func(c *Config) { c.Timeout = time.Millisecond }, "timeout 1ms, want at least 100ms"},
		{"connect timeout", func(c *Config) { c.ConnectTimeout = -time.Second }, "connect timeout -1s"},
		{"algorithm", func(c *Config) { c.Algorithm = 7 }, "unknown algorithm(7)"},
		{"segment", func(c *Config) { c.SegmentBytes = 1002 }, "segment size 1002, want a multiple of 4"},
		{"socket buffer", func(c *Config) { c.SocketBuffer = 100 }, "socket buffer 100, want -1, 0 or 4096"},
		{"autotuned socket buffer", func(c *Config) { c.SocketBuffer = -1 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Addrs = slices.Clone(good.Addrs)
			tc.mod(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig)):
				t.Fatalf("error %v, want ErrConfig containing %q", err, tc.want)
			}
		})
	}
}

func TestFromRankTable(t *testing.T) {
	local, err := ranktable.Generate(ranktable.GenerateOptions{Devices: 8, Scheme: ranktable.SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromRankTable(local, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rank != 3 || cfg.Size != 8 || cfg.Addrs[0] != "127.1.0.1:29500" || cfg.Addrs[7] != "127.1.0.8:29507" {
		t.Fatalf("config %+v", cfg)
	}
	if fmt.Sprint(cfg.Hosts) != "[0 0 0 0 0 0 0 0]" {
		t.Errorf("hosts %v, want one server", cfg.Hosts)
	}
	cfg.Secret = testSecret()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	two, err := ranktable.Generate(ranktable.GenerateOptions{Devices: 8, Hosts: 2, Scheme: ranktable.SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = FromRankTable(two, 0, 0); err != nil || fmt.Sprint(cfg.Hosts) != "[0 0 0 0 0 0 0 0 1 1 1 1 1 1 1 1]" {
		t.Errorf("two servers: hosts %v (%v), want 8 ranks on each", cfg.Hosts, err)
	}

	// Simulated devices on ordinary hosts: each server's ranks listen on
	// its host_nic_ip, told apart by their ports.
	nic, err := ranktable.Generate(ranktable.GenerateOptions{Servers: []string{"127.0.0.1", "127.0.0.2"}, HostNic: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = FromRankTable(nic, 9, 0); err != nil || cfg.Addrs[0] != "127.0.0.1:29500" || cfg.Addrs[7] != "127.0.0.1:29507" || cfg.Addrs[8] != "127.0.0.2:29508" {
		t.Errorf("host_nic_ip table: addrs %v (%v), want every server's ranks on its host_nic_ip", cfg.Addrs, err)
	}

	// The seeds' example addresses are real network addresses: refused
	// unless the caller says the job runs on a real cluster.
	seeds, err := ranktable.Generate(ranktable.GenerateOptions{Devices: 2, Scheme: ranktable.SchemeSeeds})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = FromRankTable(seeds, 0, 40000)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Secret = testSecret()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `"192.1.27.6:40000" is not a loopback address`) {
		t.Fatalf("seeds table: %v, want a loopback error", err)
	}

	for _, tc := range []struct {
		rank, base int
		want       string
	}{
		{8, 0, "rank table: rank 8 out of range 0-7"},
		{0, 65530, "base port 65530 leaves no port for rank 7"},
	} {
		if _, err := FromRankTable(local, tc.rank, tc.base); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rank %d base %d: %v, want %q", tc.rank, tc.base, err, tc.want)
		}
	}
}

// Two ranks placed by a generated local rank table find each other on
// their 127.1.0.x device addresses.
func TestInitFromRankTable(t *testing.T) {
	table, err := ranktable.Generate(ranktable.GenerateOptions{DeviceRange: "4-5", Scheme: ranktable.SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 0; ; attempt++ {
		base := 20000 + rand.IntN(30000)
		cfgs := make([]Config, 2)
		for r := range cfgs {
			if cfgs[r], err = FromRankTable(table, r, base); err != nil {
				t.Fatal(err)
			}
			cfgs[r].Secret, cfgs[r].Timeout = testSecret(), 5*time.Second
		}
		comms, errs := initAll(cfgs)
		if errors.Is(errs[0], syscall.EADDRINUSE) || errors.Is(errs[1], syscall.EADDRINUSE) {
			closeAll(comms)
			if attempt < 5 {
				continue
			}
		}
		mustAll(t, errs)
		defer closeAll(comms)
		if got := comms[1].peers[0].addr; got != "127.1.0.5:"+fmt.Sprint(base) {
			t.Fatalf("rank 0 address %s", got)
		}
		mustAll(t, onAll(comms, func(r int, c *Comm) error {
			buf := []float32{float32(r + 1)}
			if err := c.AllReduce(context.Background(), buf, Sum); err != nil {
				return err
			}
			if buf[0] != 3 {
				return fmt.Errorf("sum %v, want 3", buf[0])
			}
			return nil
		}))
		return
	}
}

// freeAddrs returns n loopback addresses nobody listens on (yet): random
// addresses in 127.0.0.0/8, like a local rank table's, so no other process
// can have taken them between this choice and the listen. (Closing
// listeners on port 0 would leave ports another test process may grab.)
func freeAddrs(t *testing.T, n int) []string {
	addrs := make([]string, n)
	ip := [3]int{2 + rand.IntN(250), rand.IntN(256), 1 + rand.IntN(200)}
	port := 20000 + rand.IntN(40000)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.%d.%d.%d:%d", ip[0], ip[1], ip[2]+i, port)
	}
	return addrs
}

// Peers start at different times: Init retries until they are up.
func TestInitRetriesUntilPeersStart(t *testing.T) {
	addrs := freeAddrs(t, 3)
	errs := make(chan error, 3)
	comms := make([]*Comm, 3)
	for _, r := range []int{2, 1, 0} { // the listeners the others dial come up last
		go func() {
			var err error
			comms[r], err = Init(context.Background(), Config{Rank: r, Size: 3, Addrs: addrs, Secret: testSecret(), Timeout: 5 * time.Second})
			errs <- err
		}()
		time.Sleep(300 * time.Millisecond)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	defer closeAll(comms)
	mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.Barrier(context.Background()) }))
}

func TestInitTimesOutNamingMissingRanks(t *testing.T) {
	cfgs := configs(t, 4, func(c *Config) { c.ConnectTimeout = 1500 * time.Millisecond })
	cfgs[2].Listener.Close()
	cfgs[3].Listener.Close()
	comms, errs := initAll(cfgs[:2])
	closeAll(comms)
	for r, err := range errs {
		wantPeer(t, fmt.Sprintf("rank %d", r), err, 2, ErrPeerTimeout)
		want := fmt.Sprintf("collective: init: rank 2 (%s) did not answer within", cfgs[2].Addrs[2])
		also := fmt.Sprintf("(it never connected); also missing: rank 3 (%s)", cfgs[2].Addrs[3])
		if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), also) {
			t.Errorf("rank %d: %q, want %q ... %q", r, err, want, also)
		}
	}
}

func TestInitCanceled(t *testing.T) {
	cfgs := configs(t, 2, nil)
	cfgs[1].Listener.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := Init(ctx, cfgs[0])
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled", err)
	}
}

// A rank with the wrong secret cannot join: it fails at once, and the
// rank it tried to join refuses it and reports the refusal when its own
// wait for the real rank ends.
func TestWrongSecretIsRefused(t *testing.T) {
	cfgs := configs(t, 2, func(c *Config) { c.ConnectTimeout = 1500 * time.Millisecond })
	cfgs[1].Secret = []byte("not-the-job-secret-at-all")
	start := time.Now()
	_, errs := initAll(cfgs)
	wantPeer(t, "rank 1 (wrong secret)", errs[1], 0, ErrAuth)
	if !strings.Contains(errs[1].Error(), "failed the secret check") {
		t.Errorf("rank 1: %q", errs[1])
	}
	wantPeer(t, "rank 0", errs[0], 1, ErrPeerTimeout)
	if !strings.Contains(errs[0].Error(), "connection(s) that did not prove the job secret, e.g. 127.0.0.1:") || !strings.Contains(errs[0].Error(), "failed the secret check (claimed rank 1)") {
		t.Errorf("rank 0: %q does not report the refused connections", errs[0])
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
}

func TestMismatchedJobsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mod    func(cfgs []Config)
		want0  string // rank 0's error, about rank 1
		want1  string // rank 1's error, about rank 0
		reason error
	}{
		{
			name: "size",
			mod: func(cfgs []Config) {
				cfgs[1].Size = 3
				cfgs[1].Addrs = append(slices.Clone(cfgs[1].Addrs), "127.0.0.1:1")
			},
			want0: "has rank size 3, this rank 2", want1: "has rank size 2, this rank 3", reason: ErrMismatch,
		},
		{
			name:  "addresses",
			mod:   func(cfgs []Config) { cfgs[0].Addrs = []string{cfgs[0].Addrs[0], "127.0.0.1:1"} },
			want0: "has a different address list", want1: "has a different address list", reason: ErrMismatch,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgs := configs(t, 2, nil)
			tc.mod(cfgs)
			comms, errs := initAll(cfgs)
			closeAll(comms)
			wantPeer(t, "rank 0", errs[0], 1, tc.reason)
			wantPeer(t, "rank 1", errs[1], 0, tc.reason)
			if !strings.Contains(errs[0].Error(), tc.want0) || !strings.Contains(errs[1].Error(), tc.want1) {
				t.Errorf("errors %q and %q, want %q and %q", errs[0], errs[1], tc.want0, tc.want1)
			}
		})
	}
}

// Strays connecting to a rank's port (garbage, silence, a process without
// the secret) are refused without disturbing Init.
func TestStrayConnectionsAreRefused(t *testing.T) {
	cfgs := configs(t, 2, nil)
	addr := cfgs[0].Addrs[0]
	done := make(chan struct{})
	var c0 *Comm
	var err0 error
	go func() { c0, err0 = Init(context.Background(), cfgs[0]); close(done) }()

	garbage, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer garbage.Close()
	garbage.Write([]byte(strings.Repeat("GET / HTTP/1.1\r\n", 10)))
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	impostor := cfgs[1]
	impostor.Secret = []byte("guessed-secret-guessed-secret")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	err = newHandshaker(&impostor).client(conn, 0, connData)
	conn.Close()
	if !errors.Is(err, ErrAuth) || !isFatal(err) {
		t.Fatalf("impostor handshake: %v, want a fatal ErrAuth", err)
	}

	c1, err1 := Init(context.Background(), cfgs[1])
	<-done
	if err0 != nil || err1 != nil {
		t.Fatalf("init with strays around: %v, %v", err0, err1)
	}
	comms := []*Comm{c0, c1}
	defer closeAll(comms)
	mustAll(t, onAll(comms, func(r int, c *Comm) error { return c.Barrier(context.Background()) }))
}

// Data connections get the configured socket buffers (Linux reports twice
// the requested size), which bounds the kernel memory a job can pin.
func TestSocketBufferIsApplied(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_RCVBUF accounting is Linux's")
	}
	comms := group(t, 2, func(c *Config) { c.SocketBuffer = 64 << 10 })
	raw, err := comms[0].peers[1].data.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var rcv, snd int
	raw.Control(func(fd uintptr) {
		rcv, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		snd, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	if rcv != 128<<10 || snd != 128<<10 {
		t.Fatalf("SO_RCVBUF %d, SO_SNDBUF %d, want %d each", rcv, snd, 128<<10)
	}
}
