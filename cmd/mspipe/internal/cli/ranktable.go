package cli

import (
	"fmt"
	"strings"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/internal/diag"
	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/spf13/cobra"
)

func newRanktableCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ranktable",
		Short: "Check and write HCCL rank tables (RANK_TABLE_FILE)",
		Long: `An HCCL rank table is the JSON file RANK_TABLE_FILE points at: which hosts
(server_id) take part, which devices each host contributes (device_id, the
device's NIC address device_ip) and the rank each device gets (rank_id).
The layout is that of the MindSpore examples rank_table_8pcs.json,
rank_table_2pcs.json and rank_table_16pcs.json.`,
	}
	cmd.AddCommand(newRanktableValidateCmd(), newRanktableGenerateCmd())
	return cmd
}

func newRanktableValidateCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check rank tables against HCCL's rules",
		Long: `Check rank tables against HCCL's rules and report every problem, not only
the first, as file:line:col: error|warning: message.

Errors: version other than "1.0", status other than "completed", server_count
differing from the number of servers, values that are JSON numbers instead of
strings ("rank_id": "0", not 0), unknown, duplicate or missing keys, a host
with other than 1, 2, 4 or 8 devices, several hosts without 8 devices each,
2 or 4 devices that span the two device networks 0-3 and 4-7, device_id
outside 0-7 or repeated, rank ids that repeat or leave gaps in 0..N-1, rank
ids not ascending in lexicographic server_id order (textual: "10.0.0.10"
sorts before "10.0.0.9") and device order, device_ip not a unique IPv4
address, two servers with the same IP, JSON syntax errors.

Warnings (the table still passes): a placeholder server_id such as
"10.*.*.*", as in the documentation's examples; replace it with the host's IP
before a cluster run. Between placeholders the rank order cannot be checked.

Formats: text (problems on stdout, a summary on stderr), json (a report on stdout),
github (GitHub Actions annotations on stdout, summary on stderr).

Exit status: 0 every table valid (warnings allowed), 1 a table is invalid,
2 usage error or a file that cannot be read (missing, a directory, over
16 MiB).`,
		Example: `  mspipe ranktable validate rank_table_8pcs.json
  mspipe ranktable validate cluster/*.json --format github   # annotations in GitHub Actions
  mspipe ranktable validate rank_table_16pcs.json --format json | jq '.files[].problems'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := diag.ParseFormat(format)
			if err != nil {
				return usageErr(fmt.Errorf("--format: %w", err))
			}
			results := make([]diag.Result, len(args))
			for i, path := range args {
				_, problems, err := ranktable.Load(path)
				results[i] = diag.Result{File: path, Diagnostics: problems, Err: err}
			}
			return reportResults(cmd, diag.Reporter{Format: f, One: "rank table", Many: "rank tables"}, results)
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json or github (GitHub Actions annotations)")
	return cmd
}

func newRanktableGenerateCmd() *cobra.Command {
	var (
		servers     []string
		hosts       int
		devices     int
		deviceRange string
		hostNic     bool
		scheme      string
		output      string
	)
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Write a rank table for a cluster (the seeds' layout)",
		Long: `Write a rank table for one host with 1, 2, 4 or 8 devices, or for several
hosts with 8 devices each, in the byte layout of the MindSpore examples.

Hosts come from --servers (their IPs; ranks are given in lexicographic order
of the IPs, which is also the order they are written in) or from --hosts N.
Devices per host come from --devices N (devices 0 to N-1) or --device-range,
such as 4-7: 2 or 4 devices must sit on one of the two device networks, 0-3
or 4-7.

Address schemes:
  seeds  the documentation's example addresses: server_id "10.*.*.*" unless
         --servers is given, device d of the h-th host at
         192.<d%4+1>.27.<6+2h+d/4>. With the defaults the output is exactly
         rank_table_8pcs.json (and with --hosts 2, rank_table_16pcs.json).
         These are examples: on hardware, device_ip comes from
         /etc/hccn.conf and server_id is each host's IP.
  local  devices simulated on this machine, loopback addresses only:
         server_id 127.0.0.1, 127.0.0.2, ... and device d of host h at
         127.1.<h>.<d+1>.

Simulated devices on a cluster of ordinary hosts: --host-nic writes each
server's server_id as its host_nic_ip. The ranks of a server then listen on
that address (ports apart) instead of on device_ip, which on Ascend hardware
belongs to the NPU's own NIC.

The table goes to stdout, or atomically to the file -o names.`,
		Example: `  mspipe ranktable generate > rank_table_8pcs.json              # the documented 8-device table
  mspipe ranktable generate --devices 2 -o rank_table_2pcs.json
  mspipe ranktable generate --device-range 4-7 --scheme local    # 4 simulated devices on one network
  mspipe ranktable generate --servers 192.168.0.10,192.168.0.11 -o rank_table_16pcs.json
  mspipe ranktable generate --servers 192.168.0.10,192.168.0.11 --host-nic   # simulated devices on two hosts`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// 0 is the flag's "not given"; given, it must count hosts.
			if cmd.Flags().Changed("hosts") && hosts < 1 {
				return usageErr(fmt.Errorf("--hosts %d: a cluster has at least one host", hosts))
			}
			table, err := ranktable.Generate(ranktable.GenerateOptions{
				Servers: servers, Hosts: hosts, Devices: devices, DeviceRange: deviceRange, Scheme: ranktable.Scheme(scheme), HostNic: hostNic,
			})
			if err != nil {
				return usageErr(err)
			}
			data := table.Encode()
			stderr := cmd.ErrOrStderr()
			if output == "" || output == "-" {
				if _, err := cmd.OutOrStdout().Write(data); err != nil {
					return usageErr(fmt.Errorf("write rank table: %w", err))
				}
			} else {
				if err := atomicfile.WriteFile(output, data, 0o644); err != nil {
					return usageErr(fmt.Errorf("write rank table: %w", err))
				}
				n, ranks := len(table.ServerList), table.RankSize()
				fmt.Fprintf(stderr, "wrote %s: %d %s, %d %s\n", output, n, plural(n, "server", "servers"), ranks, plural(ranks, "rank", "ranks"))
			}
			for _, s := range table.ServerList {
				if strings.Contains(s.ServerID, "*") {
					fmt.Fprintf(stderr, "note: server_id %q is a placeholder: pass --servers with the hosts' IPs for a real cluster, or --scheme local to simulate\n", s.ServerID)
					break
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&servers, "servers", nil, "comma-separated server_id of each host (IPv4, or a placeholder like 10.*.*.*)")
	f.IntVar(&hosts, "hosts", 0, "number of hosts when --servers is not given (default 1)")
	f.IntVar(&devices, "devices", 0, "devices per host: 1, 2, 4 or 8, from device 0 (default 8)")
	f.StringVar(&deviceRange, "device-range", "", "devices per host as FIRST-LAST, such as 0-7, 4-7 or 2-3")
	f.StringVar(&scheme, "scheme", string(ranktable.SchemeSeeds), "address scheme: seeds (documentation example addresses) or local (loopback, simulated devices)")
	f.StringVarP(&output, "output", "o", "", "write the table to this file atomically instead of stdout")
	f.BoolVar(&hostNic, "host-nic", false, "write each server_id as the server's host_nic_ip: simulated devices on ordinary hosts listen there")
	cmd.MarkFlagsMutuallyExclusive("devices", "device-range")
	cmd.MarkFlagsMutuallyExclusive("servers", "hosts")
	return cmd
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
