package netns

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"sync/atomic"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// namePrefix starts the name of every namespace this package creates.
const namePrefix = "mspipe-netns-"

// MaxHosts bounds New: server addresses 10.213.0.10-99 keep textual order
// equal to host order, and device subnets 10.213.100-199.x stay distinct.
const MaxHosts = 90

// MaxDevices is the number of device addresses a host may have, as HCCL's
// eight devices per server.
const MaxDevices = 8

// seq numbers the clusters of this process, so their names never clash.
var seq atomic.Int64

// Host is one simulated server.
type Host struct {
	Name      string       // "host0", "host1", ...
	Netns     string       // network namespace the host's processes run in
	ServerIP  netip.Addr   // the host's own address, its rank table server_id
	DeviceIPs []netip.Addr // one address per device, its rank table device_ip
}

// Cluster is a set of hosts on one bridge.
type Cluster struct {
	Hosts []Host
	// bridgeNetns holds the bridge and the bridge ends of the veth pairs.
	bridgeNetns string
}

// Command returns a command that runs name with args inside host's
// namespace (through "ip netns exec", which execs name in place, so the
// command's process is the program itself). ctx kills it as
// exec.CommandContext does.
func (c *Cluster) Command(ctx context.Context, host int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", c.Hosts[host].Netns, name}, args...)...)
}

// RankTable returns the cluster's rank table: one server per host with its
// ServerIP as server_id, one device per device address, rank ids in host
// and device order, host_nic_ip "reserve".
func (c *Cluster) RankTable() *ranktable.RankTable {
	t := &ranktable.RankTable{Version: "1.0", ServerCount: strconv.Itoa(len(c.Hosts)), Status: "completed"}
	rank := 0
	for _, h := range c.Hosts {
		s := ranktable.Server{ServerID: h.ServerIP.String(), HostNicIP: "reserve"}
		for d, a := range h.DeviceIPs {
			s.Device = append(s.Device, ranktable.Device{
				DeviceID: strconv.Itoa(d), DeviceIP: a.String(), RankID: strconv.Itoa(rank),
			})
			rank++
		}
		t.ServerList = append(t.ServerList, s)
	}
	return t
}

// WriteRankTable writes RankTable to path (atomically, mode 0644). It
// refuses a table HCCL's rules reject, such as 2 hosts of 4 devices.
func (c *Cluster) WriteRankTable(path string) error {
	t := c.RankTable()
	if err := t.Validate().Err(); err != nil {
		return fmt.Errorf("rank table of the simulated cluster: %w", err)
	}
	if err := atomicfile.WriteFile(path, t.Encode(), 0o644); err != nil {
		return fmt.Errorf("write rank table: %w", err)
	}
	return nil
}
