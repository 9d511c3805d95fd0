package train

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// twoServers is a 16-device table of servers 10.0.0.1 and 10.0.0.2 whose
// device d has the address 10.<server>.0.<d+1>.
func twoServers(t *testing.T) *ranktable.RankTable {
	t.Helper()
	table, err := ranktable.Generate(ranktable.GenerateOptions{Servers: []string{"10.0.0.1", "10.0.0.2"}, Devices: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i := range table.ServerList {
		for j := range table.ServerList[i].Device {
			table.ServerList[i].Device[j].DeviceIP = netip.AddrFrom4([4]byte{10, byte(i + 1), 0, byte(j + 1)}).String()
		}
	}
	if err := table.Validate().Err(); err != nil {
		t.Fatal(err)
	}
	return table
}

// onSubnet says an address is local when it lies in prefix.
func onSubnet(prefix string) func(netip.Addr) bool {
	p := netip.MustParsePrefix(prefix)
	return p.Contains
}

func fixedAddrs() []string { return []string{"192.0.2.7", "127.0.0.1"} }

func TestLocalShareSecondServer(t *testing.T) {
	share, err := localShare(twoServers(t), onSubnet("10.2.0.0/16"), fixedAddrs)
	if err != nil {
		t.Fatal(err)
	}
	if !share.SpansHosts() || share.Size != 16 || len(share.Ranks) != 8 || share.Lead() != 8 {
		t.Fatalf("share %+v: want ranks 8-15 of 16, lead 8", share)
	}
	for i, r := range share.Ranks {
		if r.RankID != 8+i || r.DeviceID != i || r.ServerID != "10.0.0.2" {
			t.Errorf("local rank %d = %+v", i, r)
		}
	}
	if got, want := share.Describe(), "ranks 8-15 of 16 run here (server 10.0.0.2); the others run on their servers"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
}

func TestLocalShareEverythingHere(t *testing.T) {
	share, err := localShare(twoServers(t), onSubnet("10.0.0.0/8"), fixedAddrs)
	if err != nil {
		t.Fatal(err)
	}
	if share.SpansHosts() || len(share.Ranks) != 16 || share.Lead() != 0 {
		t.Fatalf("share %+v: want all 16 ranks here, lead 0", share)
	}
}

func TestLocalShareLoopbackTable(t *testing.T) {
	table, err := ranktable.Generate(ranktable.GenerateOptions{Hosts: 2, Devices: 8, Scheme: ranktable.SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	// The real test: this machine can listen on every loopback address.
	share, err := localShare(table, canListen, interfaceAddrs)
	if err != nil {
		t.Fatal(err)
	}
	if share.SpansHosts() || len(share.Ranks) != 16 {
		t.Fatalf("loopback table: %d of %d ranks here, want all", len(share.Ranks), share.Size)
	}
}

func TestLocalShareRefusals(t *testing.T) {
	table := twoServers(t)
	_, err := localShare(table, onSubnet("172.16.0.0/12"), fixedAddrs)
	for _, want := range []string{"no rank runs on this host", "this host has 192.0.2.7, 127.0.0.1", "the table's servers are 10.0.0.1, 10.0.0.2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no local rank: %v, want %q", err, want)
		}
	}
	// Half of server 10.0.0.2's devices on this host: its other ranks
	// could never start anywhere.
	half := func(a netip.Addr) bool { return onSubnet("10.2.0.0/16")(a) && a.As4()[3] <= 4 }
	_, err = localShare(table, half, fixedAddrs)
	if want := "server 10.0.0.2 has ranks 8-11 on this host but ranks 12-15 on addresses this host does not have"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("split server: %v, want %q", err, want)
	}
}

func TestRankRanges(t *testing.T) {
	for _, tc := range []struct {
		ids  []int
		want string
	}{
		{[]int{3}, "3"}, {[]int{0, 1, 2, 3, 4, 5, 6, 7}, "0-7"}, {[]int{16, 0, 1, 17}, "0-1, 16-17"}, {[]int{1, 3}, "1, 3"},
	} {
		if got := rankRanges(tc.ids); got != tc.want {
			t.Errorf("rankRanges(%v) = %q, want %q", tc.ids, got, tc.want)
		}
	}
}

func TestSharedSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, size int, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Repeat("k", size)), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.secret", 32, 0o600)
	for _, tc := range []struct {
		name, env string
		spans     bool
		want      string // "" means accepted
	}{
		{"unset, one host", "", false, ""},
		{"unset, several hosts", "", true, "MSPIPE_JOB_SECRET_FILE is not set); make one: umask 077 && head -c 32 /dev/urandom > job.secret"},
		{"good", good, true, ""},
		{"read-only is stricter", write("ro.secret", 16, 0o400), true, ""},
		{"group readable", write("group.secret", 32, 0o640), true, "mode 0640 lets others read or write the job secret: want 0600 or stricter"},
		{"short", write("short.secret", 15, 0o600), true, "15 bytes, want at least 16"},
		{"directory", dir, true, "not a regular file"},
		{"missing", filepath.Join(dir, "none"), true, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvJobSecretFile, tc.env)
			path, err := sharedSecretFile(tc.spans)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			case tc.want == "" && path != tc.env:
				t.Fatalf("path %q, want %q", path, tc.env)
			}
		})
	}
}

func TestBasePort(t *testing.T) {
	table, err := ranktable.Generate(ranktable.GenerateOptions{Hosts: 2, Devices: 8, Scheme: ranktable.SchemeLocal})
	if err != nil {
		t.Fatal(err)
	}
	all, err := localShare(table, canListen, interfaceAddrs)
	if err != nil {
		t.Fatal(err)
	}
	// Only server 127.0.0.2's ranks "here": the job spans hosts.
	second := hostShare{Ranks: all.Ranks[8:], Size: 16, Servers: []string{"127.0.0.2"}}
	if got, err := basePort(With{}, table, second); err != nil || got != collective.DefaultBasePort {
		// The default range may be taken by another process on this
		// machine; then the error must say so.
		if err == nil || !strings.Contains(err.Error(), "set with.collective_base_port") {
			t.Fatalf("spanning hosts: port %d, %v; want %d", got, err, collective.DefaultBasePort)
		}
	}
	// A port of a local rank in use is refused, naming rank and address.
	busy, err := net.Listen("tcp", "127.1.1.4:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	if port < 12 {
		t.Skip("kernel picked a port below 12")
	}
	_, err = basePort(With{CollectiveBasePort: port - 11}, table, second)
	if want := "rank 11 cannot listen on 127.1.1.4:"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("busy port: %v, want %q", err, want)
	}
	if _, err := basePort(With{CollectiveBasePort: 65530}, table, second); err == nil || !strings.Contains(err.Error(), "leaves no port for rank 15") {
		t.Errorf("base port 65530: %v, want a refusal", err)
	}
	// One host, no port given: a free range, not the fixed default.
	if got, err := basePort(With{}, table, all); err != nil || got < 20000 || got >= 50000 {
		t.Errorf("one host: port %d, %v; want a free range from 20000", got, err)
	}
}
