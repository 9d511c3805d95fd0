// Command ranktable writes a rank table of HOSTS servers of 8 devices for
// bench/plan: a cluster larger than `mspipe ranktable generate` writes
// (its address schemes stop at 254 simulated hosts), with server ids
// 10.0.<h/256>.<h%256> and device IPs 10.<1+d>.<h/256>.<h%256>. The table
// is only planned, never run.
//
//	go run ./bench/plan/ranktable -hosts 512 -o rt.json
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/ranktable"
)

func main() {
	hosts := flag.Int("hosts", 1, "servers of 8 devices, 1 to 65536")
	out := flag.String("o", "", "file to write")
	flag.Parse()
	if err := run(*hosts, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ranktable:", err)
		os.Exit(1)
	}
}

func run(hosts int, out string) error {
	if hosts < 1 || hosts > 1<<16 || out == "" {
		return fmt.Errorf("want -hosts from 1 to 65536 and -o FILE")
	}
	ids := make([]string, hosts)
	for h := range ids {
		ids[h] = fmt.Sprintf("10.0.%d.%d", h/256, h%256)
	}
	slices.Sort(ids) // HCCL assigns ranks in lexicographic server_id order
	t := &ranktable.RankTable{Version: "1.0", ServerCount: strconv.Itoa(hosts), Status: "completed"}
	rank := 0
	for _, id := range ids {
		var a, b, c, d int
		if _, err := fmt.Sscanf(id, "%d.%d.%d.%d", &a, &b, &c, &d); err != nil {
			return err
		}
		s := ranktable.Server{ServerID: id, HostNicIP: "reserve"}
		for dev := range 8 {
			s.Device = append(s.Device, ranktable.Device{
				DeviceID: strconv.Itoa(dev),
				DeviceIP: fmt.Sprintf("10.%d.%d.%d", 1+dev, c, d),
				RankID:   strconv.Itoa(rank),
			})
			rank++
		}
		t.ServerList = append(t.ServerList, s)
	}
	if err := t.Validate().Err(); err != nil {
		return fmt.Errorf("the table fails validation: %w", err)
	}
	return atomicfile.WriteFile(out, t.Encode(), 0o644)
}
