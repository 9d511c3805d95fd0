package ranktable

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// RankTable is an HCCL rank table (version 1.0), the file RANK_TABLE_FILE
// points at. Field order follows the seeds' files; every number is a JSON
// string there, so it is a string here too.
type RankTable struct {
	Version     string   `json:"version"`
	ServerCount string   `json:"server_count"`
	ServerList  []Server `json:"server_list"`
	Status      string   `json:"status"`

	// File positions by JSON path, filled by Parse; nil for in-memory tables.
	pos map[string]Pos
	// Paths whose value was missing or of the wrong JSON type: Parse has
	// reported them already, so Validate skips them instead of piling up
	// consequential errors.
	bad map[string]bool
	// file is the name problems are reported under.
	file string
}

// Server is one host in server_list.
type Server struct {
	ServerID  string   `json:"server_id"`
	Device    []Device `json:"device"`
	HostNicIP string   `json:"host_nic_ip"`
}

// Device is one NPU of a host.
type Device struct {
	DeviceID string `json:"device_id"` // physical device number on its host, "0" to "7"
	DeviceIP string `json:"device_ip"` // IP address of the device's integrated NIC
	RankID   string `json:"rank_id"`   // logical rank in the cluster, from "0"
}

// Rank describes one device of the cluster by its rank.
type Rank struct {
	RankID    int
	ServerID  string
	DeviceID  int
	DeviceIP  string
	HostNicIP string // its server's host_nic_ip: "reserve", "" or an address
	HostIndex int    // index of the server in server_list
}

// ListenIP is the address a simulated device's collective endpoint uses:
// its server's host_nic_ip when the table gives an address there, else its
// device_ip. On Ascend hardware device_ip belongs to the NPU's own NIC;
// simulated devices run on the host's CPU, so a cluster of ordinary hosts
// (one address each) names that address as host_nic_ip and the eight
// devices of a server share it, told apart by their ports.
func (r Rank) ListenIP() string {
	if r.HostNicIP != "" && r.HostNicIP != "reserve" {
		return r.HostNicIP
	}
	return r.DeviceIP
}

// ListenKey names the rank table key ListenIP comes from, for messages.
func (r Rank) ListenKey() string {
	if r.ListenIP() == r.HostNicIP {
		return "host_nic_ip"
	}
	return "device_ip"
}

// File returns the name the table was parsed under ("" for in-memory tables).
func (t *RankTable) File() string { return t.file }

// Position returns the file position of the value at a JSON path such as
// "server_list[0].device[2].rank_id", or of the object or array itself for
// "server_list[0]". It reports false for unknown paths and in-memory tables.
func (t *RankTable) Position(path string) (Pos, bool) {
	p, ok := t.pos[path]
	return p, ok
}

// RankSize is the number of devices in the table, the value of RANK_SIZE.
func (t *RankTable) RankSize() int {
	n := 0
	for _, s := range t.ServerList {
		n += len(s.Device)
	}
	return n
}

// Ranks lists every device sorted by rank id. It fails if a device_id or
// rank_id is not a non-negative integer; call it on a validated table.
func (t *RankTable) Ranks() ([]Rank, error) {
	ranks := make([]Rank, 0, t.RankSize())
	for i, s := range t.ServerList {
		for j, d := range s.Device {
			dev, err := parseIndex(d.DeviceID)
			if err != nil {
				return nil, fmt.Errorf("%s: device_id %q: %w", devicePath(i, j), d.DeviceID, err)
			}
			rank, err := parseIndex(d.RankID)
			if err != nil {
				return nil, fmt.Errorf("%s: rank_id %q: %w", devicePath(i, j), d.RankID, err)
			}
			ranks = append(ranks, Rank{RankID: rank, ServerID: s.ServerID, DeviceID: dev, DeviceIP: d.DeviceIP, HostNicIP: s.HostNicIP, HostIndex: i})
		}
	}
	slices.SortStableFunc(ranks, func(a, b Rank) int { return a.RankID - b.RankID })
	return ranks, nil
}

// Encode returns the table in the layout of the seeds' rank_table_*.json
// files: four-space indents, one device object per line, the device list
// closed on its last line, "host_nic_ip" indented by 13 spaces (left out
// when the table has none), and a final
// newline. Generated tables therefore diff cleanly against the documented ones.
func (t *RankTable) Encode() []byte {
	var b bytes.Buffer
	b.WriteString("{\n")
	fmt.Fprintf(&b, "    \"version\": %s,\n", quote(t.Version))
	fmt.Fprintf(&b, "    \"server_count\": %s,\n", quote(t.ServerCount))
	if len(t.ServerList) == 0 {
		b.WriteString("    \"server_list\": [],\n")
	} else {
		b.WriteString("    \"server_list\": [\n")
		for i, s := range t.ServerList {
			b.WriteString("        {\n")
			fmt.Fprintf(&b, "            \"server_id\": %s,\n", quote(s.ServerID))
			if len(s.Device) == 0 {
				b.WriteString("            \"device\": []")
			} else {
				b.WriteString("            \"device\": [\n")
				for j, d := range s.Device {
					fmt.Fprintf(&b, "                {\"device_id\": %s,\"device_ip\": %s,\"rank_id\": %s}",
						quote(d.DeviceID), quote(d.DeviceIP), quote(d.RankID))
					if j < len(s.Device)-1 {
						b.WriteString(",\n")
					}
				}
				b.WriteString("]")
			}
			// A table that left host_nic_ip out (valid, with a warning)
			// keeps it out: "" is not a value the key may have.
			if s.HostNicIP == "" {
				b.WriteString("\n")
			} else {
				fmt.Fprintf(&b, ",\n             \"host_nic_ip\": %s\n", quote(s.HostNicIP))
			}
			if i < len(t.ServerList)-1 {
				b.WriteString("        },\n")
			} else {
				b.WriteString("        }\n")
			}
		}
		b.WriteString("    ],\n")
	}
	fmt.Fprintf(&b, "    \"status\": %s\n", quote(t.Status))
	b.WriteString("}\n")
	return b.Bytes()
}

// quote returns s as a JSON string literal without HTML escaping.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// parseIndex parses a non-negative decimal integer written the way the seeds
// write them: digits only, no sign, no leading zero, at most 9 digits.
func parseIndex(s string) (int, error) {
	switch {
	case s == "":
		return 0, errors.New("empty")
	case len(s) > 9:
		return 0, errors.New("too many digits")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a non-negative integer")
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, errors.New("leading zero")
	}
	return strconv.Atoi(s)
}

// JSON paths used as keys for positions and in problems.

func serverPath(i int) string    { return "server_list[" + strconv.Itoa(i) + "]" }
func devicesPath(i int) string   { return serverPath(i) + ".device" }
func devicePath(i, j int) string { return devicesPath(i) + "[" + strconv.Itoa(j) + "]" }
