package ranktable

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// shape describes a JSON document's structure: keys in order and value kinds,
// with every array reduced to the shape of its elements (which must agree).
func shape(t *testing.T, n *node) string {
	t.Helper()
	switch n.kind {
	case kindObject:
		parts := make([]string, len(n.members))
		for i, m := range n.members {
			parts[i] = m.key + ":" + shape(t, m.val)
		}
		return "{" + strings.Join(parts, ",") + "}"
	case kindArray:
		elem := ""
		for i, e := range n.elems {
			s := shape(t, e)
			if i > 0 && s != elem {
				t.Fatalf("array elements differ in shape: %s vs %s", elem, s)
			}
			elem = s
		}
		return "[" + elem + "]"
	default:
		return n.describe()
	}
}

func parseShape(t *testing.T, data []byte) string {
	t.Helper()
	p := &parser{file: "x", data: data}
	root := p.tree()
	if root == nil {
		t.Fatalf("parse: %s", formatProblems(p.problems))
	}
	return shape(t, root)
}

func TestGenerateReproducesSeeds(t *testing.T) {
	tests := []struct {
		file string
		opts GenerateOptions
	}{
		{"rank_table_8pcs.json", GenerateOptions{}},
		{"rank_table_8pcs.json", GenerateOptions{Devices: 8, Scheme: SchemeSeeds}},
		{"rank_table_2pcs.json", GenerateOptions{Devices: 2}},
		{"rank_table_16pcs.json", GenerateOptions{Hosts: 2}},
		{"rank_table_16pcs.json", GenerateOptions{Servers: []string{"10.*.*.*", "10.*.*.*"}, DeviceRange: "0-7"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			want, err := os.ReadFile("testdata/valid/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			table, err := Generate(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := table.Encode(); !bytes.Equal(got, want) {
				t.Errorf("Generate(%+v) differs from %s:\n%s", tt.opts, tt.file, got)
			}
		})
	}
}

func TestGenerateValidates(t *testing.T) {
	seedShape := func(file string) string {
		data, err := os.ReadFile("testdata/valid/" + file)
		if err != nil {
			t.Fatal(err)
		}
		return parseShape(t, data)
	}
	single, multi := seedShape("rank_table_8pcs.json"), seedShape("rank_table_16pcs.json")
	if single != multi {
		t.Fatalf("seed tables differ in structure:\n%s\n%s", single, multi)
	}
	for _, scheme := range []Scheme{SchemeSeeds, SchemeLocal} {
		for _, tc := range []struct {
			hosts, devices int
			rng            string
		}{{1, 1, ""}, {1, 2, ""}, {1, 4, ""}, {1, 8, ""}, {2, 8, ""}, {3, 8, ""}, {1, 0, "4-7"}, {1, 0, "6-7"}, {1, 0, "5"}} {
			opts := GenerateOptions{Hosts: tc.hosts, Devices: tc.devices, DeviceRange: tc.rng, Scheme: scheme}
			table, err := Generate(opts)
			if err != nil {
				t.Errorf("Generate(%+v): %v", opts, err)
				continue
			}
			data := table.Encode()
			parsed, problems := Check("gen.json", data)
			if problems.HasErrors() {
				t.Errorf("Generate(%+v) output invalid:\n%s", opts, formatProblems(problems))
				continue
			}
			if got := parseShape(t, data); got != single {
				t.Errorf("Generate(%+v) structure\n%s\nwant\n%s", opts, got, single)
			}
			ranks, err := parsed.Ranks()
			if err != nil {
				t.Fatal(err)
			}
			perHost := len(ranks) / tc.hosts
			if len(ranks) != tc.hosts*max(tc.devices, 1) && tc.rng == "" {
				t.Errorf("Generate(%+v) has %d ranks", opts, len(ranks))
			}
			for i, r := range ranks {
				if r.HostIndex != i/perHost {
					t.Errorf("Generate(%+v) rank %d on host %d", opts, i, r.HostIndex)
				}
				ip := netip.MustParseAddr(r.DeviceIP)
				server, serr := netip.ParseAddr(r.ServerID)
				if scheme == SchemeLocal && (!ip.IsLoopback() || serr != nil || !server.IsLoopback()) {
					t.Errorf("local scheme rank %d: server %s, device %s not loopback", i, r.ServerID, r.DeviceIP)
				}
				if scheme == SchemeSeeds && r.ServerID != "10.*.*.*" {
					t.Errorf("seeds scheme server_id %q", r.ServerID)
				}
			}
		}
	}
}

func TestGenerateLocal(t *testing.T) {
	table, err := Generate(GenerateOptions{Hosts: 2, Scheme: SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	ranks, err := table.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][2]string{0: {"127.0.0.1", "127.1.0.1"}, 7: {"127.0.0.1", "127.1.0.8"}, 8: {"127.0.0.2", "127.1.1.1"}, 15: {"127.0.0.2", "127.1.1.8"}}
	for rank, w := range want {
		if got := [2]string{ranks[rank].ServerID, ranks[rank].DeviceIP}; got != w {
			t.Errorf("rank %d = %v, want %v", rank, got, w)
		}
	}
	// Ten hosts: lexicographic order puts 127.0.0.10 second.
	table, err = Generate(GenerateOptions{Hosts: 10, Scheme: SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	if got := table.ServerList[1].ServerID; got != "127.0.0.10" {
		t.Errorf("second server = %s, want 127.0.0.10", got)
	}
	if problems := table.Validate(); len(problems) != 0 {
		t.Errorf("10-host local table: %s", formatProblems(problems))
	}
}

func TestGenerateSortsServers(t *testing.T) {
	table, err := Generate(GenerateOptions{Servers: []string{"10.0.0.2", " 10.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if table.ServerList[0].ServerID != "10.0.0.1" || table.ServerList[0].Device[0].RankID != "0" ||
		table.ServerList[1].ServerID != "10.0.0.2" || table.ServerList[1].Device[0].RankID != "8" {
		t.Errorf("servers not in lexicographic rank order:\n%s", table.Encode())
	}
	if problems := table.Validate(); len(problems) != 0 {
		t.Errorf("real-IP table has problems: %s", formatProblems(problems))
	}
}

func TestGenerateRejects(t *testing.T) {
	tests := []struct {
		name string
		opts GenerateOptions
		msg  string
	}{
		{"three devices", GenerateOptions{Devices: 3}, "3 devices per host: HCCL supports 1, 2, 4 or 8"},
		{"range across networks", GenerateOptions{DeviceRange: "2-5"}, "devices 2-5 span both device networks"},
		{"range too high", GenerateOptions{DeviceRange: "4-8"}, "a host has devices 0-7"},
		{"range reversed", GenerateOptions{DeviceRange: "7-4"}, "first device after last"},
		{"range garbage", GenerateOptions{DeviceRange: "all"}, `device range "all": want FIRST-LAST`},
		{"count and range", GenerateOptions{Devices: 8, DeviceRange: "0-7"}, "not both"},
		{"multi-host four", GenerateOptions{Hosts: 2, Devices: 4}, "2 hosts with 4 devices each: a multi-host cluster needs 8"},
		{"duplicate server", GenerateOptions{Servers: []string{"10.0.0.1", "10.0.0.1"}}, `server "10.0.0.1" given twice`},
		{"bad server", GenerateOptions{Servers: []string{"node1"}}, `server "node1" is neither an IPv4 address nor a placeholder`},
		{"local needs loopback", GenerateOptions{Servers: []string{"10.0.0.1"}, Scheme: SchemeLocal}, "loopback addresses"},
		{"local rejects placeholder", GenerateOptions{Servers: []string{"10.*.*.*"}, Scheme: SchemeLocal}, "loopback addresses"},
		{"unknown scheme", GenerateOptions{Scheme: "cloud"}, `unknown scheme "cloud"`},
		{"hosts and servers disagree", GenerateOptions{Servers: []string{"10.0.0.1"}, Hosts: 2}, "1 server given but hosts is 2"},
		{"negative hosts", GenerateOptions{Hosts: -1}, "hosts must be positive"},
		{"too many hosts", GenerateOptions{Hosts: 126}, "at most 125"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := Generate(tt.opts)
			if err == nil {
				t.Fatalf("Generate(%+v) succeeded:\n%s", tt.opts, table.Encode())
			}
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Generate(%+v) = %v, want ErrOptions mentioning %q", tt.opts, err, tt.msg)
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	// Unusual but legal strings survive Encode and Parse unchanged.
	table := &RankTable{Version: "1.0", ServerCount: "1", Status: "completed", ServerList: []Server{{
		ServerID: `a"b\c<d>é`, HostNicIP: "reserve", Device: []Device{{DeviceID: "0", DeviceIP: "\t", RankID: "0"}},
	}}}
	parsed, problems := Parse("x", table.Encode())
	if problems.HasErrors() {
		t.Fatal(problems.Err())
	}
	if got := parsed.ServerList[0]; got.ServerID != table.ServerList[0].ServerID || got.Device[0].DeviceIP != "\t" {
		t.Errorf("round trip changed values: %+v", got)
	}
}

// TestGenerateHostNic: --host-nic writes each server_id as its
// host_nic_ip, which becomes every rank's listen address on that server;
// without it device_ip is. Placeholder server ids cannot be one.
func TestGenerateHostNic(t *testing.T) {
	tbl, err := Generate(GenerateOptions{Servers: []string{"10.0.0.2", "10.0.0.1"}, HostNic: true})
	if err != nil {
		t.Fatal(err)
	}
	parsed, problems := Parse("rt.json", tbl.Encode())
	if problems.HasErrors() {
		t.Fatalf("generated table does not parse: %v", problems.Err())
	}
	if problems := parsed.Validate(); problems.HasErrors() {
		t.Fatalf("generated table is not valid: %v", problems.Err())
	}
	ranks, err := tbl.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranks {
		if r.ListenIP() != r.ServerID || r.ListenKey() != "host_nic_ip" {
			t.Errorf("rank %d listens on %s (%s), want its server %s", r.RankID, r.ListenIP(), r.ListenKey(), r.ServerID)
		}
	}
	if ranks[9].ServerID != "10.0.0.2" {
		t.Errorf("rank 9 is on %s, want 10.0.0.2 (lexicographic server order)", ranks[9].ServerID)
	}
	plain, err := Generate(GenerateOptions{Servers: []string{"10.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ranks, _ = plain.Ranks()
	if r := ranks[3]; r.ListenIP() != r.DeviceIP || r.ListenKey() != "device_ip" {
		t.Errorf("with host_nic_ip reserve, rank 3 listens on %s (%s), want device_ip %s", r.ListenIP(), r.ListenKey(), r.DeviceIP)
	}
	if _, err := Generate(GenerateOptions{Hosts: 2, HostNic: true}); err == nil || !strings.Contains(err.Error(), `host_nic_ip from server_id "10.*.*.*"`) {
		t.Errorf("placeholder servers with HostNic: err = %v", err)
	}
}
