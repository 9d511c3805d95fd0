package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Available returns nil when this process can create network namespaces:
// it runs as root, the ip command (iproute2) is installed and a probe
// namespace can be created and removed. Otherwise it says what is missing.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("ip command (iproute2) not found: %w", err)
	}
	probe := fmt.Sprintf("%s%d-probe%d", namePrefix, os.Getpid(), seq.Add(1))
	if err := ip("netns", "add", probe); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	if err := ip("netns", "del", probe); err != nil {
		return fmt.Errorf("cannot remove probe network namespace %s: %w", probe, err)
	}
	return nil
}

// New creates hosts namespaces with devicesPerHost device addresses each,
// all joined by one bridge, and registers their removal with tb.Cleanup.
// It fails the test when they cannot be made; call Available first to skip
// instead.
func New(tb testing.TB, hosts, devicesPerHost int) *Cluster {
	tb.Helper()
	if hosts < 1 || hosts > MaxHosts {
		tb.Fatalf("netns: %d hosts: want 1 to %d", hosts, MaxHosts)
	}
	if devicesPerHost < 1 || devicesPerHost > MaxDevices {
		tb.Fatalf("netns: %d devices per host: want 1 to %d", devicesPerHost, MaxDevices)
	}
	if err := removeStale(); err != nil {
		tb.Logf("netns: removing stale namespaces: %v", err)
	}
	base := fmt.Sprintf("%s%d-%d", namePrefix, os.Getpid(), seq.Add(1))
	c := &Cluster{bridgeNetns: base + "-br"}
	for h := range hosts {
		host := Host{
			Name:     "host" + strconv.Itoa(h),
			Netns:    base + "-h" + strconv.Itoa(h),
			ServerIP: netip.AddrFrom4([4]byte{10, 213, 0, byte(10 + h)}),
		}
		for d := range devicesPerHost {
			host.DeviceIPs = append(host.DeviceIPs, netip.AddrFrom4([4]byte{10, 213, byte(100 + h), byte(10 + d)}))
		}
		c.Hosts = append(c.Hosts, host)
	}
	tb.Cleanup(func() {
		if err := c.remove(); err != nil {
			tb.Errorf("netns: %v", err)
		}
	})
	if err := c.create(); err != nil {
		tb.Fatalf("netns: %v", err)
	}
	return c
}

// create builds the bridge namespace and one namespace per host.
func (c *Cluster) create() error {
	if err := ip("netns", "add", c.bridgeNetns); err != nil {
		return err
	}
	bridge := []string{
		"link set lo up",
		"link add br0 type bridge",
		"link set br0 up",
	}
	if err := batch(c.bridgeNetns, bridge); err != nil {
		return err
	}
	for h, host := range c.Hosts {
		if err := ip("netns", "add", host.Netns); err != nil {
			return err
		}
		end := bridgeEnd(h)
		if err := batch(c.bridgeNetns, []string{
			fmt.Sprintf("link add %s type veth peer name eth0 netns %s", end, host.Netns),
			fmt.Sprintf("link set %s master br0", end),
			fmt.Sprintf("link set %s up", end),
		}); err != nil {
			return err
		}
		cmds := []string{"link set lo up", fmt.Sprintf("addr add %s/16 dev eth0", host.ServerIP)}
		for _, a := range host.DeviceIPs {
			cmds = append(cmds, fmt.Sprintf("addr add %s/16 dev eth0", a))
		}
		cmds = append(cmds, "link set eth0 up")
		if err := batch(host.Netns, cmds); err != nil {
			return err
		}
	}
	return nil
}

// bridgeEnd names the bridge-side end of host h's veth pair.
func bridgeEnd(h int) string { return "vh" + strconv.Itoa(h) }

// remove kills whatever still runs in the cluster's namespaces and deletes
// them. Leftover processes are a bug of the test that started them, so
// they are reported.
func (c *Cluster) remove() error {
	names := []string{c.bridgeNetns}
	for _, h := range c.Hosts {
		names = append(names, h.Netns)
	}
	var errs []error
	for _, name := range names {
		if !exists(name) {
			continue
		}
		if pids, err := netnsPids(name); err == nil && len(pids) > 0 {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			errs = append(errs, fmt.Errorf("processes left running in %s were killed: %v", name, pids))
		}
		if err := ip("netns", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Do runs fn on an OS thread that has entered host's namespace, so sockets
// fn creates (net.Listen, net.Dial) belong to that host and keep belonging
// to it after Do returns. Goroutines fn starts run elsewhere, in this
// process's own namespace.
func (c *Cluster) Do(host int, fn func() error) error {
	target, err := os.Open("/run/netns/" + c.Hosts[host].Netns)
	if err != nil {
		return fmt.Errorf("open namespace of %s: %w", c.Hosts[host].Name, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	// A fresh goroutine whose thread is thrown away if it cannot return to
	// the original namespace: a goroutine that exits while locked takes its
	// thread with it.
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			errc <- fmt.Errorf("open own namespace: %w", err)
			return
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter namespace of %s: %w", c.Hosts[host].Name, err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(fnErr, fmt.Errorf("leave namespace of %s: %w", c.Hosts[host].Name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// Processes lists the ids of the processes running in the cluster's
// namespaces, so a test can check that nothing outlived it.
func (c *Cluster) Processes() ([]int, error) {
	var all []int
	for _, h := range c.Hosts {
		pids, err := netnsPids(h.Netns)
		if err != nil {
			return nil, err
		}
		all = append(all, pids...)
	}
	return all, nil
}

// SetLink takes host's link down (up false) or brings it back: the bridge
// end of its veth pair goes down, so nothing passes in either direction
// while the host keeps its addresses and routes.
func (c *Cluster) SetLink(host int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	if host < 0 || host >= len(c.Hosts) {
		return fmt.Errorf("set link: no host %d in a cluster of %d", host, len(c.Hosts))
	}
	if err := ip("-n", c.bridgeNetns, "link", "set", bridgeEnd(host), state); err != nil {
		return fmt.Errorf("set link of %s %s: %w", c.Hosts[host].Name, state, err)
	}
	return nil
}

// removeStale deletes this package's namespaces whose creating process is
// gone (a test binary killed before its Cleanup ran).
func removeStale() error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("ip netns list: %w", err)
	}
	var errs []error
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], namePrefix) {
			continue
		}
		name := fields[0]
		pidText, _, _ := strings.Cut(strings.TrimPrefix(name, namePrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || processExists(pid) {
			continue
		}
		if pids, err := netnsPids(name); err == nil {
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		if err := ip("netns", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func exists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

// netnsPids lists the processes inside namespace name.
func netnsPids(name string) ([]int, error) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns pids %s: %w", name, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// ip runs the ip command and returns its stderr in the error.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// batch runs ip commands inside namespace ns with one ip process.
func batch(ns string, cmds []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip -n %s -batch (%s): %w: %s", ns, strings.Join(cmds, "; "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
