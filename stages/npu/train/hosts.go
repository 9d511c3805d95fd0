package train

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/mspipe/mspipe/npu/launch"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// hostShare is the part of a rank table's job that runs on this machine.
// As in the seeds' run_cluster.sh, every server runs the same pipeline and
// starts the ranks whose device_ip (or host_nic_ip, see
// ranktable.Rank.ListenIP) is one of its own addresses; the other
// servers start theirs.
type hostShare struct {
	// Ranks lists the ranks to start here, in rank order.
	Ranks []ranktable.Rank
	// Size is the job's rank size, RANK_SIZE.
	Size int
	// Servers are the server_id values of the local ranks, in table order.
	Servers []string
}

// SpansHosts reports whether ranks of the job run on other machines.
func (h hostShare) SpansHosts() bool { return len(h.Ranks) < h.Size }

// Lead is the rank whose results and log lines the stage reports: rank 0
// when it runs here, else the lowest local rank.
func (h hostShare) Lead() int { return h.Ranks[0].RankID }

// Describe says which ranks run here, for the stage log.
func (h hostShare) Describe() string {
	ids := make([]int, len(h.Ranks))
	for i, r := range h.Ranks {
		ids[i] = r.RankID
	}
	return fmt.Sprintf("ranks %s of %d run here (server %s); the others run on their servers",
		rankRanges(ids), h.Size, strings.Join(h.Servers, ", "))
}

// localShare selects the ranks of t that run on this machine: those whose
// listen address (device_ip, or the server's host_nic_ip) isLocal says
// this host can listen on. A server of the table is
// this host's entirely or not at all; a job with no local rank is refused,
// naming the host's addresses and the table's servers.
func localShare(t *ranktable.RankTable, isLocal func(netip.Addr) bool, hostAddrs func() []string) (hostShare, error) {
	ranks, err := t.Ranks()
	if err != nil {
		return hostShare{}, err
	}
	share := hostShare{Size: len(ranks)}
	localOf := map[int][]int{}  // server index -> local rank ids
	remoteOf := map[int][]int{} // server index -> other rank ids
	for _, r := range ranks {
		ip, err := netip.ParseAddr(r.ListenIP())
		if err == nil && isLocal(ip) {
			share.Ranks = append(share.Ranks, r)
			localOf[r.HostIndex] = append(localOf[r.HostIndex], r.RankID)
		} else {
			remoteOf[r.HostIndex] = append(remoteOf[r.HostIndex], r.RankID)
		}
	}
	for i, s := range t.ServerList {
		local, remote := localOf[i], remoteOf[i]
		switch {
		case len(local) > 0 && len(remote) > 0:
			return hostShare{}, fmt.Errorf("rank table %s: server %s has ranks %s on this host but ranks %s on addresses this host does not have: a server's devices are all on one host",
				tableName(t), s.ServerID, rankRanges(local), rankRanges(remote))
		case len(local) > 0:
			share.Servers = append(share.Servers, s.ServerID)
		}
	}
	if len(share.Ranks) == 0 {
		servers := make([]string, len(t.ServerList))
		for i, s := range t.ServerList {
			servers[i] = s.ServerID
		}
		return hostShare{}, fmt.Errorf("rank table %s: no rank runs on this host: none of its device_ip (or host_nic_ip) addresses is an address of this host (this host has %s; the table's servers are %s); run the pipeline on those servers, or use a table with this host's addresses (mspipe ranktable generate --scheme local for simulated devices)",
			tableName(t), strings.Join(hostAddrs(), ", "), strings.Join(servers, ", "))
	}
	return share, nil
}

// canListen reports whether ip is one of this host's addresses.
func canListen(ip netip.Addr) bool { return launch.CanListen(ip.String()) }

// interfaceAddrs lists this host's IP addresses, for error messages.
func interfaceAddrs() []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return []string{"(unknown: " + err.Error() + ")"}
	}
	var out []string
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().String())
		}
	}
	if len(out) == 0 {
		return []string{"no addresses"}
	}
	return out
}

func tableName(t *ranktable.RankTable) string {
	if t.File() != "" {
		return t.File()
	}
	return "(in memory)"
}

// rankRanges writes sorted rank ids compactly: "0-7", "0-7, 16-23".
func rankRanges(ids []int) string {
	ids = slices.Sorted(slices.Values(ids))
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ids[i]))
		} else {
			parts = append(parts, strconv.Itoa(ids[i])+"-"+strconv.Itoa(ids[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
