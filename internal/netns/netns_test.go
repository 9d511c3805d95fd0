//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/ranktable"
)

func requireNetns(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("network namespaces unavailable: %v", err)
	}
}

// listen opens a TCP listener on addr inside host's namespace and accepts
// connections until the test ends.
func listen(t *testing.T, c *Cluster, host int, addr netip.Addr) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := c.Do(host, func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listen on %s in host %d: %v", addr, host, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("hello"))
			conn.Close()
		}
	}()
	return ln
}

// dial connects from host's namespace and reads the listener's greeting.
func dial(c *Cluster, host int, addr string) error {
	return c.Do(host, func() error {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 5)
		if _, err := conn.Read(buf); err != nil {
			return err
		}
		if string(buf) != "hello" {
			return errors.New("unexpected greeting " + string(buf))
		}
		return nil
	})
}

func TestHostsReachEachOtherUntilLinkDown(t *testing.T) {
	requireNetns(t)
	c := New(t, 2, 2)
	ln := listen(t, c, 1, c.Hosts[1].DeviceIPs[1])

	if err := dial(c, 0, ln.Addr().String()); err != nil {
		t.Fatalf("host0 -> %s: %v", ln.Addr(), err)
	}
	if err := c.SetLink(1, false); err != nil {
		t.Fatal(err)
	}
	if err := dial(c, 0, ln.Addr().String()); err == nil {
		t.Fatalf("host0 -> %s succeeded with host1's link down", ln.Addr())
	}
	if err := c.SetLink(1, true); err != nil {
		t.Fatal(err)
	}
	if err := dial(c, 0, ln.Addr().String()); err != nil {
		t.Fatalf("host0 -> %s after link up: %v", ln.Addr(), err)
	}
}

func TestHostAddressesAreIsolated(t *testing.T) {
	requireNetns(t)
	c := New(t, 2, 1)
	ln := listen(t, c, 1, c.Hosts[1].ServerIP)
	// This process's own namespace has none of the cluster's addresses.
	conn, err := net.DialTimeout("tcp", ln.Addr().String(), 500*time.Millisecond)
	if err == nil {
		conn.Close()
		t.Fatalf("reached %s from the root namespace", ln.Addr())
	}
	// A host cannot bind another host's address.
	err = c.Do(0, func() error {
		l, err := net.Listen("tcp", netip.AddrPortFrom(c.Hosts[1].DeviceIPs[0], 0).String())
		if err == nil {
			l.Close()
		}
		return err
	})
	if err == nil {
		t.Fatal("host0 could bind host1's device address")
	}
}

func TestCommandRunsInsideHost(t *testing.T) {
	requireNetns(t)
	c := New(t, 2, 3)
	out, err := c.Command(context.Background(), 1, "ip", "-o", "-4", "addr", "show", "dev", "eth0").Output()
	if err != nil {
		t.Fatalf("ip addr in host1: %v", err)
	}
	for _, a := range append([]netip.Addr{c.Hosts[1].ServerIP}, c.Hosts[1].DeviceIPs...) {
		if !strings.Contains(string(out), " "+a.String()+"/16 ") {
			t.Errorf("host1's eth0 lacks %s:\n%s", a, out)
		}
	}
	if strings.Contains(string(out), c.Hosts[0].ServerIP.String()+"/") {
		t.Errorf("host1's eth0 has host0's address:\n%s", out)
	}
	lo, err := c.Command(context.Background(), 0, "ip", "-o", "link", "show", "dev", "lo").Output()
	if err != nil || !strings.Contains(string(lo), "UP") {
		t.Errorf("lo in host0 is not up (%v): %s", err, lo)
	}
}

func TestRankTable(t *testing.T) {
	requireNetns(t)
	c := New(t, 2, 8)
	path := filepath.Join(t.TempDir(), "rank_table_16pcs.json")
	if err := c.WriteRankTable(path); err != nil {
		t.Fatal(err)
	}
	table, problems, err := ranktable.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 {
		t.Fatalf("generated table has problems: %v", problems)
	}
	ranks, err := table.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	if len(ranks) != 16 {
		t.Fatalf("%d ranks, want 16", len(ranks))
	}
	for _, r := range ranks {
		h, d := r.RankID/8, r.RankID%8
		if r.ServerID != c.Hosts[h].ServerIP.String() || r.DeviceID != d || r.DeviceIP != c.Hosts[h].DeviceIPs[d].String() {
			t.Errorf("rank %d = %+v, want server %s device %d ip %s", r.RankID, r, c.Hosts[h].ServerIP, d, c.Hosts[h].DeviceIPs[d])
		}
	}
	// HCCL wants 8 devices on every host of a multi-host cluster.
	small := New(t, 2, 4)
	if err := small.WriteRankTable(filepath.Join(t.TempDir(), "bad.json")); err == nil {
		t.Error("2 hosts x 4 devices: table written, want HCCL's 8 x N refusal")
	}
}

func TestCleanupRemovesNamespacesAndStaleOnes(t *testing.T) {
	requireNetns(t)
	// A namespace named as if by a process that no longer exists (no pid
	// reaches 999999999), its sequence number this test process's pid so
	// that two suites at once do not make the same one.
	stale := fmt.Sprintf("%s999999999-%d-h0", namePrefix, os.Getpid())
	if err := ip("netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if exists(stale) {
			ip("netns", "del", stale)
		}
	})
	var names []string
	t.Run("cluster", func(t *testing.T) {
		c := New(t, 2, 1)
		if exists(stale) {
			t.Errorf("stale namespace %s survived New", stale)
		}
		names = append(names, c.bridgeNetns, c.Hosts[0].Netns, c.Hosts[1].Netns)
		for _, n := range names {
			if !exists(n) {
				t.Errorf("namespace %s missing", n)
			}
		}
	})
	for _, n := range names {
		if exists(n) {
			t.Errorf("namespace %s left after the test", n)
		}
	}
	if _, err := os.Stat("/run/netns/" + stale); err == nil {
		t.Errorf("stale namespace %s still there", stale)
	}
}

func TestProcessesListsWhatRunsInside(t *testing.T) {
	requireNetns(t)
	c := New(t, 2, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := c.Command(ctx, 1, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// ip netns exec enters the namespace just after it starts.
	var pids []int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var err error
		if pids, err = c.Processes(); err != nil {
			t.Fatal(err)
		}
		if len(pids) > 0 {
			break
		}
	}
	if len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Errorf("processes %v, want [%d]", pids, cmd.Process.Pid)
	}
	cancel()
	cmd.Wait()
	if pids, err := c.Processes(); err != nil || len(pids) != 0 {
		t.Errorf("after kill: processes %v (%v), want none", pids, err)
	}
}
