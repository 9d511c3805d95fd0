// Package netns simulates the hosts of a cluster on one Linux machine for
// tests: each host is a network namespace of its own, joined to the others
// by a veth pair into a bridge that lives in one more namespace. Nothing is
// configured in the machine's own namespace, and only the addresses the
// package assigns inside its namespaces are used, so tests never reach a
// real network.
//
// The simplest use, in a test that runs as root:
//
//	if err := netns.Available(); err != nil {
//		t.Skipf("network namespaces: %v", err)
//	}
//	c := netns.New(t, 2, 8)                 // 2 hosts, 8 device addresses each
//	c.WriteRankTable(path)                  // server_id = host address, one device_ip per device
//	cmd := c.Command(ctx, 1, "mspipe", "run", "spec.yaml")  // runs inside host 1
//	c.SetLink(1, false)                     // pull host 1's cable
//
// # Addresses
//
// Host h has the server address 10.213.0.<10+h> and device d of host h the
// address 10.213.<100+h>.<10+d>, all in 10.213.0.0/16 on the host's eth0,
// so every address reaches every other one across the bridge. Server
// addresses sort textually in host order, as HCCL's rank order wants. Two
// clusters never share a bridge, so parallel tests may use the same
// addresses without meeting.
//
// # Names and cleanup
//
// Namespaces are named mspipe-netns-<pid>-<seq>-h<host> (and -br for the
// bridge), unique per process and cluster. The test's Cleanup kills what
// still runs inside them and deletes them; New also deletes namespaces of
// this package whose process no longer exists, left behind by a test
// binary that was killed. A namespace of a process whose id the system has
// since reused is kept until that process ends too.
//
// # Links
//
// SetLink takes the bridge end of a host's veth down, as if its cable were
// pulled: packets in both directions vanish silently, so peers see a
// timeout rather than an immediate error, as across a real network.
//
// # Platforms
//
// Linux only, as root with iproute2's ip command. Elsewhere, and without
// them, Available says what is missing, so tests skip with that reason.
package netns
