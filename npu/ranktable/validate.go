package ranktable

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/mspipe/mspipe/internal/diag"
)

// Validate checks the table against HCCL's rules as the seeds state them and
// returns every problem found, sorted by position. Only error-level problems
// make the table unusable; see the package documentation for the rules and
// for what is a warning.
func (t *RankTable) Validate() diag.List {
	c := &checker{t: t}
	c.check()
	c.problems.Sort()
	return c.problems
}

type checker struct {
	t        *RankTable
	problems diag.List
}

// usable reports whether path and all its ancestors decoded with the right
// JSON type; problems below an unusable path were reported by Parse already.
func (c *checker) usable(path string) bool {
	for {
		if c.t.bad[path] {
			return false
		}
		if path == "" {
			return true
		}
		path = parentPath(path)
	}
}

func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// pos returns the position of path, or of its nearest ancestor that has one.
func (c *checker) pos(path string) Pos {
	for {
		if p, ok := c.t.pos[path]; ok || path == "" {
			return p
		}
		path = parentPath(path)
	}
}

// where names path for a message: its line:col, or the path itself for
// tables without positions.
func (c *checker) where(path string) string {
	if p := c.pos(path); p.IsValid() {
		return p.String()
	}
	return path
}

// report records a problem at path. Tables built in memory have no
// positions, so there the JSON path leads the message instead.
func (c *checker) report(sev diag.Severity, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	pos := c.pos(path)
	if !pos.IsValid() && path != "" {
		msg = path + ": " + msg
	}
	c.problems = append(c.problems, diag.Diagnostic{
		File: c.t.file, Line: pos.Line, Column: pos.Col, Severity: sev, Message: msg,
	})
}

func (c *checker) errorf(path, format string, args ...any) {
	c.report(diag.Error, path, format, args...)
}

func (c *checker) warnf(path, format string, args ...any) {
	c.report(diag.Warning, path, format, args...)
}

// rankRef is a parsed rank_id with where it came from.
type rankRef struct {
	rank   int
	device int // device_id, -1 if not a valid one
	path   string
}

func (c *checker) check() {
	t := c.t
	if c.usable("version") && t.Version != "1.0" {
		c.errorf("version", "unsupported version %q: mspipe reads rank tables of version \"1.0\"", t.Version)
	}
	if c.usable("status") && t.Status != "completed" {
		c.errorf("status", "status is %q; a rank table is ready for HCCL only when its status is \"completed\"", t.Status)
	}
	listOK := c.usable("server_list")
	if c.usable("server_count") {
		n, err := parseIndex(t.ServerCount)
		switch {
		case err != nil:
			c.errorf("server_count", "server_count %q is not a number of servers%s", t.ServerCount, indexHint(err))
		case listOK && n != len(t.ServerList):
			c.errorf("server_count", "server_count is %q but server_list has %s", t.ServerCount, plural(len(t.ServerList), "server"))
		}
	}
	if !listOK {
		return
	}
	if len(t.ServerList) == 0 {
		c.errorf("server_list", "server_list is empty; a rank table needs at least one server")
		return
	}
	c.servers()
}

// servers checks every server and device, then the rank ids as a whole.
func (c *checker) servers() {
	t := c.t
	multi := len(t.ServerList) > 1
	serverIDs := map[string]string{}  // real server_id -> its path
	deviceIPs := map[string]string{}  // device_ip -> its path
	hostNicIPs := map[string]string{} // host_nic_ip address -> its path
	placeholders := 0
	total := 0       // devices in usable device lists
	complete := true // every server and device decoded, every rank_id and device_id valid
	perServer := make([][]rankRef, len(t.ServerList))
	for i, s := range t.ServerList {
		sp := serverPath(i)
		if !c.usable(sp) {
			complete = false
			continue
		}
		if c.usable(sp + ".server_id") {
			switch classifyServerID(s.ServerID) {
			case placeholderID:
				placeholders++
				c.warnf(sp+".server_id", "placeholder server_id %q: replace with the host's IP before running on a cluster", s.ServerID)
			case realID:
				if first, dup := serverIDs[s.ServerID]; dup {
					c.errorf(sp+".server_id", "duplicate server_id %q (first at %s); every server needs its own IP", s.ServerID, c.where(first))
				} else {
					serverIDs[s.ServerID] = sp + ".server_id"
				}
			default:
				c.errorf(sp+".server_id", "server_id %q is neither an IPv4 address nor a placeholder such as \"10.*.*.*\"", s.ServerID)
			}
		}
		if c.usable(sp+".host_nic_ip") && s.HostNicIP != "reserve" {
			if checkIPv4(s.HostNicIP) != "" {
				c.errorf(sp+".host_nic_ip", "host_nic_ip %q is neither \"reserve\" nor an IPv4 address", s.HostNicIP)
			} else if first, dup := hostNicIPs[s.HostNicIP]; dup {
				// Simulated devices listen on their server's host_nic_ip:
				// two servers cannot be one host.
				c.errorf(sp+".host_nic_ip", "duplicate host_nic_ip %q (first at %s); every server has its own host NIC", s.HostNicIP, c.where(first))
			} else {
				hostNicIPs[s.HostNicIP] = sp + ".host_nic_ip"
			}
		}
		dp := devicesPath(i)
		if !c.usable(dp) {
			complete = false
			continue
		}
		n := len(s.Device)
		total += n
		switch {
		case n == 0:
			c.errorf(dp, "%s has no devices; HCCL supports 1, 2, 4 or 8 devices on one host", sp)
		case n != 1 && n != 2 && n != 4 && n != 8:
			c.errorf(dp, "%s has %d devices; HCCL supports 1, 2, 4 or 8 devices on one host", sp, n)
		case multi && n != 8:
			c.errorf(dp, "%s has %s; a multi-host cluster needs 8 devices on every server (8×N)", sp, plural(n, "device"))
		}
		refs, ok := c.devices(i, s, deviceIPs)
		perServer[i] = refs
		if !ok {
			complete = false
		}
		if ok && !multi && (n == 2 || n == 4) {
			ids := make([]int, len(refs))
			for k, r := range refs {
				ids[k] = r.device
			}
			slices.Sort(ids)
			if ids[0] < 4 && ids[len(ids)-1] >= 4 {
				c.errorf(dp, "devices %s span both device networks (0-3 and 4-7); a %d-device cluster must stay inside one", formatRanges(ids), n)
			}
		}
	}
	if !c.rankIDs(perServer, total, complete) {
		return
	}
	c.rankOrder(perServer)
	if multi && placeholders > 0 {
		c.warnf("server_list", "rank order against lexicographic server_id order is not checked for placeholder server_ids; validate again once they are the hosts' IPs")
	}
}

// devices checks the devices of server i. It returns one rankRef per device
// with a valid rank_id, and whether every device_id and rank_id was valid.
func (c *checker) devices(i int, s Server, deviceIPs map[string]string) ([]rankRef, bool) {
	ok := true
	seen := map[int]string{} // device_id -> its path
	refs := make([]rankRef, 0, len(s.Device))
	for j, d := range s.Device {
		p := devicePath(i, j)
		if !c.usable(p) {
			ok = false
			continue
		}
		device := -1
		if c.usable(p + ".device_id") {
			id, err := parseIndex(d.DeviceID)
			switch {
			case err != nil:
				c.errorf(p+".device_id", "device_id %q is not a device number 0-7%s", d.DeviceID, indexHint(err))
			case id > 7:
				c.errorf(p+".device_id", "device_id %q is out of range: a host has devices 0-7", d.DeviceID)
			default:
				if first, dup := seen[id]; dup {
					c.errorf(p+".device_id", "duplicate device_id %q in %s (first at %s)", d.DeviceID, serverPath(i), c.where(first))
				} else {
					seen[id] = p + ".device_id"
					device = id
				}
			}
		}
		if device < 0 {
			ok = false
		}
		if c.usable(p + ".device_ip") {
			if msg := checkIPv4(d.DeviceIP); msg != "" {
				c.errorf(p+".device_ip", "device_ip %q %s", d.DeviceIP, msg)
			} else if first, dup := deviceIPs[d.DeviceIP]; dup {
				c.errorf(p+".device_ip", "duplicate device_ip %q (first at %s); every device needs its own IP", d.DeviceIP, c.where(first))
			} else {
				deviceIPs[d.DeviceIP] = p + ".device_ip"
			}
		}
		if !c.usable(p + ".rank_id") {
			ok = false
			continue
		}
		rank, err := parseIndex(d.RankID)
		if err != nil {
			c.errorf(p+".rank_id", "rank_id %q is not a non-negative integer%s", d.RankID, indexHint(err))
			ok = false
			continue
		}
		refs = append(refs, rankRef{rank: rank, device: device, path: p + ".rank_id"})
	}
	return refs, ok
}

// rankIDs checks that rank ids are unique and cover 0..total-1. It reports
// whether they do and every one was readable, so the order can be checked.
func (c *checker) rankIDs(perServer [][]rankRef, total int, complete bool) bool {
	valid := complete
	seen := map[int]string{}
	for _, refs := range perServer {
		for _, r := range refs {
			switch first, dup := seen[r.rank]; {
			case r.rank >= total:
				c.errorf(r.path, "rank_id %d is out of range: %s need rank ids 0-%d", r.rank, plural(total, "device"), total-1)
				valid = false
			case dup:
				c.errorf(r.path, "duplicate rank_id %d (first at %s)", r.rank, c.where(first))
				valid = false
			default:
				seen[r.rank] = r.path
			}
		}
	}
	if !complete || total == 0 {
		return false
	}
	var missing []int
	for r := range total {
		if _, ok := seen[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		c.errorf("server_list", "rank ids must cover 0-%d, one per device; missing %s", total-1, formatRanges(missing))
		return false
	}
	return valid
}

// rankOrder checks how rank ids are laid out: ascending with device_id inside
// a server, one contiguous block per server, and blocks ascending in
// lexicographic server_id order. It runs only on a complete set of valid,
// unique rank ids.
func (c *checker) rankOrder(perServer [][]rankRef) {
	t := c.t
	type block struct {
		server   int
		min, max int
		ranks    []int
	}
	blocks := make([]block, 0, len(perServer))
	contiguous := true
	for i, refs := range perServer {
		if len(refs) == 0 {
			continue
		}
		byDevice := slices.Clone(refs)
		slices.SortFunc(byDevice, func(a, b rankRef) int { return a.device - b.device })
		for k := 1; k < len(byDevice); k++ {
			if prev, cur := byDevice[k-1], byDevice[k]; cur.rank < prev.rank {
				c.errorf(cur.path, "rank_id %d of device_id %d is lower than rank_id %d of device_id %d; inside a server, rank ids ascend with device_id",
					cur.rank, cur.device, prev.rank, prev.device)
				break
			}
		}
		ranks := make([]int, len(refs))
		for k, r := range refs {
			ranks[k] = r.rank
		}
		slices.Sort(ranks)
		b := block{server: i, min: ranks[0], max: ranks[len(ranks)-1], ranks: ranks}
		if b.max-b.min+1 != len(ranks) {
			c.errorf(devicesPath(i), "%s holds rank ids %s; a server's rank ids must form one contiguous block", serverPath(i), formatRanges(ranks))
			contiguous = false
		}
		blocks = append(blocks, b)
	}
	if !contiguous {
		return
	}
	slices.SortFunc(blocks, func(a, b block) int { return a.min - b.min })
	var prev *block
	for k := range blocks {
		b := &blocks[k]
		id := t.ServerList[b.server].ServerID
		if classifyServerID(id) != realID {
			continue // placeholders have no order yet; invalid ids are reported already
		}
		if prev != nil {
			prevID := t.ServerList[prev.server].ServerID
			if id < prevID {
				c.errorf(serverPath(b.server)+".server_id",
					"server_id %q holds rank ids %s but sorts before %q (%s, rank ids %s); rank ids must ascend in lexicographic server_id order%s",
					id, formatRanges(b.ranks), prevID, serverPath(prev.server), formatRanges(prev.ranks), textualHint(id, prevID))
			}
		}
		prev = b
	}
}

// textualHint explains a lexicographic comparison that numeric intuition
// gets wrong, such as "10.0.0.10" < "10.0.0.9".
func textualHint(lower, higher string) string {
	a, errA := netip.ParseAddr(lower)
	b, errB := netip.ParseAddr(higher)
	if errA != nil || errB != nil || a.Compare(b) < 0 {
		return ""
	}
	return fmt.Sprintf(" (the comparison is textual: %q sorts before %q)", lower, higher)
}

type serverIDKind uint8

const (
	invalidID serverIDKind = iota
	realID
	placeholderID
)

// classifyServerID tells a host IPv4 address from a documentation
// placeholder: four dot-separated parts, each "*" or a number 0-255, at least
// one "*", as in the seeds' "10.*.*.*".
func classifyServerID(s string) serverIDKind {
	if checkIPv4(s) == "" {
		return realID
	}
	if !strings.Contains(s, "*") {
		return invalidID
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return invalidID
	}
	for _, p := range parts {
		if p == "*" {
			continue
		}
		if n, err := parseIndex(p); err != nil || n > 255 {
			return invalidID
		}
	}
	return placeholderID
}

// checkIPv4 returns "" for a dotted-quad IPv4 address a device or host can
// use, otherwise why not, worded to follow the quoted value.
func checkIPv4(s string) string {
	ip, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return "is not a dotted-quad IPv4 address"
	case !ip.Is4():
		return "is an IPv6 address; version 1.0 rank tables use IPv4"
	case ip.IsUnspecified():
		return "is the unspecified address, which names no device"
	}
	return ""
}

// formatRanges writes sorted ints compactly: "0-3, 8, 10-11". Long lists are
// cut after a few ranges.
func formatRanges(ints []int) string {
	const maxRanges = 6
	var parts []string
	for i := 0; i < len(ints); {
		j := i
		for j+1 < len(ints) && ints[j+1] == ints[j]+1 {
			j++
		}
		if len(parts) == maxRanges {
			parts = append(parts, "…")
			break
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ints[i]))
		} else {
			parts = append(parts, strconv.Itoa(ints[i])+"-"+strconv.Itoa(ints[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// indexHint adds what parseIndex disliked when the value looks numeric.
func indexHint(err error) string {
	switch err.Error() {
	case "leading zero":
		return " (write it without leading zeros)"
	case "too many digits":
		return " (too many digits)"
	}
	return ""
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
