package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mspipe/mspipe/internal/netns"
)

// twoHosts makes two simulated hosts of 8 devices (network namespaces)
// and an 8+8-rank mpirun job of the test binary that starts in host 0:
// mpirun runs there, and reaches host 1 through an rsh agent that enters
// host 1's namespace instead of logging in over ssh.
func twoHosts(t *testing.T, env ...string) (ExternalJob, *syncBuffer, *netns.Cluster) {
	t.Helper()
	needMPIRun(t)
	if err := netns.Available(); err != nil {
		t.Skipf("network namespaces: %v", err)
	}
	c := netns.New(t, 2, 8)
	j, events := mpiJob(t, 16, env...)
	if err := c.WriteRankTable(j.RankTable); err != nil {
		t.Fatal(err)
	}
	// The agent gets the host and the command as ssh would, and runs the
	// command in that host's namespace with a shell, as sshd does.
	agent := filepath.Join(j.Dir, "rsh-agent")
	script := "#!/bin/sh\nhost=$1\nshift\ncase $host in\n"
	for _, h := range c.Hosts {
		script += fmt.Sprintf("%s) ns=%s ;;\n", h.ServerIP, h.Netns)
	}
	script += "*) echo \"rsh-agent: no simulated host $host\" >&2; exit 255 ;;\nesac\nexec ip netns exec \"$ns\" sh -c \"$*\"\n"
	mpirun := filepath.Join(j.Dir, "mpirun-on-host0")
	for path, content := range map[string]string{
		agent:  script,
		mpirun: fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s mpirun \"$@\"\n", c.Hosts[0].Netns),
	} {
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	j.Program = mpirun
	j.Env = append(j.Env, "OMPI_MCA_plm_rsh_agent="+agent)
	j.Grace = 5 * time.Second
	t.Cleanup(func() {
		if pids, err := c.Processes(); err == nil && len(pids) > 0 {
			t.Errorf("processes left in the hosts' namespaces: %v", pids)
		}
	})
	return j, events, c
}

// TestMPIRunTwoHostsInNamespaces: mpirun places ranks 0-7 on host 0 and
// 8-15 on host 1 as the rank table says; each rank finds its device_ip on
// its host, keeps the seeds' files, and its events reach the caller from
// either host.
func TestMPIRunTwoHostsInNamespaces(t *testing.T) {
	j, events, _ := twoHosts(t)
	if err := RunExternal(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	hostfile, err := os.ReadFile(filepath.Join(j.Dir, "hostfile"))
	if err != nil || string(hostfile) != "10.213.0.10 slots=8\n10.213.0.11 slots=8\n" {
		t.Errorf("hostfile = %q, %v", hostfile, err)
	}
	for r := 0; r < 16; r++ {
		if !strings.Contains(events.String(), fmt.Sprintf("hello from %d\n", r)) {
			t.Errorf("no event from rank %d: %q", r, events.String())
		}
		log, err := os.ReadFile(LogPath(j.Dir, r))
		if want := fmt.Sprintf("rank %d device %d size 16\n", r, r%8); err != nil || string(log) != want {
			t.Errorf("train.log%d = %q, %v; want %q", r, log, err, want)
		}
		env, err := os.ReadFile(filepath.Join(DeviceDir(j.Dir, r), fmt.Sprintf("env%d.log", r)))
		if err != nil || !strings.Contains(string(env), fmt.Sprintf("\nOMPI_COMM_WORLD_LOCAL_RANK=%d\n", r%8)) {
			t.Errorf("env%d.log lacks OMPI_COMM_WORLD_LOCAL_RANK=%d: %v", r, r%8, err)
		}
	}
	noneAlive(t, j.Dir, 16)
}

// TestMPIRunTwoHostsNamesTheFailedRank: rank 11, on host 1, fails; the
// error names it and its server, and mpirun stops every rank on both hosts.
func TestMPIRunTwoHostsNamesTheFailedRank(t *testing.T) {
	j, _, _ := twoHosts(t, "EXTERNAL_RANK_WHO=11", "EXTERNAL_RANK_DO=fail")
	err := RunExternal(context.Background(), j)
	want := "server 10.213.0.11) exit status 3: rank 11 device 3 size 16 | rank gives up: the data is bad; mpirun exit status"
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(fmt.Sprint(err), "rank 11 (host ") || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("err = %v\nwant it to name rank 11 and contain %q", err, want)
	}
	noneAlive(t, j.Dir, 16)
}

// TestMPIRunStartedOnTheSecondServer: mpirun puts its first ranks on its
// own node, whatever the hostfile's order, so started on host 1 it starts
// ranks 0-7 there; they refuse, naming the server the rank table wants
// them on.
func TestMPIRunStartedOnTheSecondServer(t *testing.T) {
	j, _, c := twoHosts(t)
	if err := os.WriteFile(j.Program, []byte(fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s mpirun \"$@\"\n", c.Hosts[1].Netns)), 0o755); err != nil {
		t.Fatal(err)
	}
	err := RunExternal(context.Background(), j)
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(fmt.Sprint(err), "but the rank table puts it on server 10.213.0.") ||
		!strings.Contains(fmt.Sprint(err), "is not an address of this host") {
		t.Fatalf("err = %v\nwant a rank refusing the host mpirun put it on", err)
	}
	noneAlive(t, j.Dir, 16)
}
