package ranktable

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Scheme chooses the device IP addresses Generate writes.
type Scheme string

const (
	// SchemeSeeds mimics the addresses of the seeds' example tables:
	// device d of the h-th host (in rank order) gets 192.<d%4+1>.27.<6+2h+d/4>,
	// so host 0 uses 192.1-4.27.6-7 and host 1 uses 192.1-4.27.8-9. They are
	// example addresses, not a real cluster's: on hardware take device_ip
	// from /etc/hccn.conf. The default server_id is the seeds' placeholder
	// "10.*.*.*".
	SchemeSeeds Scheme = "seeds"

	// SchemeLocal is for devices simulated on this machine: server ids are
	// loopback addresses (default 127.0.0.1, 127.0.0.2, ... one per host)
	// and device d of host h listens on 127.1.<h>.<d+1>. Every address is
	// loopback, so simulated ranks never reach the network.
	SchemeLocal Scheme = "local"
)

// GenerateOptions describe the cluster Generate writes a rank table for.
type GenerateOptions struct {
	// Servers are the hosts' server_id values. Rank ids are assigned in
	// their lexicographic order, which is also the order in server_list.
	// Empty means Hosts default ids for the scheme.
	Servers []string
	// Hosts is the number of hosts when Servers is empty (default 1).
	Hosts int
	// Devices is the number of devices per host: 1, 2, 4 or 8, taken from
	// device 0 up. Zero means DeviceRange, or 8 if that is empty too.
	Devices int
	// DeviceRange names the devices per host instead, such as "0-7",
	// "4-7", "2-3" or "5"; 2 and 4 devices must lie within 0-3 or 4-7.
	DeviceRange string
	// Scheme selects device IPs and default server ids (default SchemeSeeds).
	Scheme Scheme
	// HostNic writes each server's server_id as its host_nic_ip, so that
	// simulated devices on ordinary hosts (one address each) listen on the
	// host's address (Rank.ListenIP). The server ids must be addresses.
	HostNic bool
}

// Generate builds a rank table for opts in the seeds' structure, with rank
// ids in lexicographic server_id order and device order, host_nic_ip
// "reserve" (or the server_id, with HostNic) and status "completed". Encode writes it out. The table passes
// Validate; with the seeds scheme's placeholder server ids it carries the
// placeholder warnings, as the seeds' own files do.
func Generate(opts GenerateOptions) (*RankTable, error) {
	scheme := opts.Scheme
	if scheme == "" {
		scheme = SchemeSeeds
	}
	if scheme != SchemeSeeds && scheme != SchemeLocal {
		return nil, fmt.Errorf("%w: unknown scheme %q (want %q or %q)", ErrOptions, scheme, SchemeSeeds, SchemeLocal)
	}
	devices, err := deviceList(opts.Devices, opts.DeviceRange)
	if err != nil {
		return nil, err
	}
	servers, err := serverIDs(opts.Servers, opts.Hosts, scheme)
	if err != nil {
		return nil, err
	}
	if len(servers) > 1 && len(devices) != 8 {
		return nil, fmt.Errorf("%w: %d hosts with %s each: a multi-host cluster needs 8 devices on every host", ErrOptions, len(servers), plural(len(devices), "device"))
	}
	if opts.HostNic {
		for _, id := range servers {
			if _, err := netip.ParseAddr(id); err != nil {
				return nil, fmt.Errorf("%w: host_nic_ip from server_id %q: give the hosts' addresses with --servers", ErrOptions, id)
			}
		}
	}
	t := &RankTable{Version: "1.0", ServerCount: strconv.Itoa(len(servers)), Status: "completed"}
	rank := 0
	for h, id := range servers {
		s := Server{ServerID: id, HostNicIP: "reserve"}
		if opts.HostNic {
			s.HostNicIP = id
		}
		for _, d := range devices {
			s.Device = append(s.Device, Device{
				DeviceID: strconv.Itoa(d),
				DeviceIP: deviceIP(scheme, h, d),
				RankID:   strconv.Itoa(rank),
			})
			rank++
		}
		t.ServerList = append(t.ServerList, s)
	}
	if err := t.Validate().Err(); err != nil {
		return nil, fmt.Errorf("generated rank table fails validation: %w", err)
	}
	return t, nil
}

func deviceIP(scheme Scheme, host, device int) string {
	if scheme == SchemeLocal {
		return fmt.Sprintf("127.1.%d.%d", host, device+1)
	}
	return fmt.Sprintf("192.%d.27.%d", device%4+1, 6+2*host+device/4)
}

// deviceList resolves Devices or DeviceRange into device ids.
func deviceList(count int, spec string) ([]int, error) {
	switch {
	case count != 0 && spec != "":
		return nil, fmt.Errorf("%w: give a device count or a device range, not both", ErrOptions)
	case spec == "" && count == 0:
		count = 8
	}
	lo, hi := 0, count-1
	if spec != "" {
		var err error
		if lo, hi, err = parseDeviceRange(spec); err != nil {
			return nil, err
		}
		count = hi - lo + 1
	}
	switch {
	case count != 1 && count != 2 && count != 4 && count != 8:
		return nil, fmt.Errorf("%w: %d devices per host: HCCL supports 1, 2, 4 or 8", ErrOptions, count)
	case (count == 2 || count == 4) && lo/4 != hi/4:
		return nil, fmt.Errorf("%w: devices %d-%d span both device networks (0-3 and 4-7); a %d-device cluster must stay inside one", ErrOptions, lo, hi, count)
	}
	ids := make([]int, 0, count)
	for d := lo; d <= hi; d++ {
		ids = append(ids, d)
	}
	return ids, nil
}

// parseDeviceRange reads "lo-hi" or a single device number, each 0-7.
func parseDeviceRange(spec string) (lo, hi int, err error) {
	loText, hiText, isRange := strings.Cut(spec, "-")
	if !isRange {
		hiText = loText
	}
	lo, errLo := parseIndex(strings.TrimSpace(loText))
	hi, errHi := parseIndex(strings.TrimSpace(hiText))
	switch {
	case errLo != nil || errHi != nil:
		return 0, 0, fmt.Errorf("%w: device range %q: want FIRST-LAST such as 0-7 or 4-7", ErrOptions, spec)
	case lo > 7 || hi > 7:
		return 0, 0, fmt.Errorf("%w: device range %q: a host has devices 0-7", ErrOptions, spec)
	case lo > hi:
		return 0, 0, fmt.Errorf("%w: device range %q: first device after last", ErrOptions, spec)
	}
	return lo, hi, nil
}

// serverIDs resolves Servers or Hosts into server ids in rank order.
func serverIDs(given []string, hosts int, scheme Scheme) ([]string, error) {
	maxHosts := 125 // the seeds scheme's last octet 6+2h+1 must stay <= 255
	if scheme == SchemeLocal {
		maxHosts = MaxLocalHosts
	}
	switch {
	case len(given) > 0 && hosts != 0 && hosts != len(given):
		return nil, fmt.Errorf("%w: %s given but hosts is %d", ErrOptions, plural(len(given), "server"), hosts)
	case len(given) == 0 && hosts < 0:
		return nil, fmt.Errorf("%w: hosts must be positive, not %d", ErrOptions, hosts)
	case len(given) == 0 && hosts == 0:
		hosts = 1
	case len(given) > 0:
		hosts = len(given)
	}
	if hosts > maxHosts {
		return nil, fmt.Errorf("%w: %d hosts: the %s scheme has addresses for at most %d", ErrOptions, hosts, scheme, maxHosts)
	}
	if len(given) == 0 {
		ids := make([]string, hosts)
		for h := range ids {
			if scheme == SchemeLocal {
				ids[h] = "127.0.0." + strconv.Itoa(h+1)
			} else {
				ids[h] = "10.*.*.*"
			}
		}
		slices.Sort(ids) // 127.0.0.10 sorts before 127.0.0.2
		return ids, nil
	}
	seen := map[string]bool{}
	ids := make([]string, len(given))
	for i, id := range given {
		id = strings.TrimSpace(id)
		kind := classifyServerID(id)
		switch {
		case kind == invalidID:
			return nil, fmt.Errorf("%w: server %q is neither an IPv4 address nor a placeholder such as \"10.*.*.*\"", ErrOptions, id)
		case kind == realID && seen[id]:
			return nil, fmt.Errorf("%w: server %q given twice", ErrOptions, id)
		case scheme == SchemeLocal && (kind != realID || !netip.MustParseAddr(id).IsLoopback()):
			return nil, fmt.Errorf("%w: server %q: the local scheme simulates hosts on loopback addresses (127.x.y.z)", ErrOptions, id)
		}
		seen[id] = true
		ids[i] = id
	}
	slices.Sort(ids)
	return ids, nil
}

// MaxLocalHosts is how many simulated hosts the local address scheme has
// addresses for: server ids 127.0.0.1 to 127.0.0.254.
const MaxLocalHosts = 254

// CheckDeviceCount applies HCCL's rule to a cluster given by a device
// count — 1, 2, 4 or 8 devices on one host, or whole 8-device hosts beyond
// that — and the most devices the local scheme can simulate (8 on each of
// MaxLocalHosts hosts). Specs (`cluster: {devices: N}`) and the launcher
// both use it.
func CheckDeviceCount(n int) error {
	switch {
	case n == 1 || n == 2 || n == 4 || n == 8:
		return nil
	case n < 8:
		return fmt.Errorf("HCCL supports 1, 2, 4 or 8 devices on one host, not %d", n)
	case n%8 != 0:
		return fmt.Errorf("%d devices: more than 8 devices need whole 8-device hosts (16, 24, ...)", n)
	case n > 8*MaxLocalHosts:
		return fmt.Errorf("%d devices: at most %d devices (%d hosts of 8) can be simulated on this machine; give a rank_table for a larger cluster", n, 8*MaxLocalHosts, MaxLocalHosts)
	}
	return nil
}
