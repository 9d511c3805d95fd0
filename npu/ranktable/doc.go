// Package ranktable provides HCCL rank tables (version 1.0, the file
// RANK_TABLE_FILE names): parsing with file positions, validation against
// HCCL's rules, and generation in the layout of the MindSpore examples
// rank_table_8pcs.json, rank_table_2pcs.json and rank_table_16pcs.json.
//
// The simplest use reads and checks a file:
//
//	t, problems, err := ranktable.Load("rank_table_8pcs.json")
//	if err != nil { ... }              // the file could not be read
//	for _, p := range problems {
//		fmt.Println(p)                 // rank_table_8pcs.json:6:26: warning: placeholder server_id ...
//	}
//	if err := problems.Err(); err != nil { ... } // the table has errors, not only warnings
//	ranks, _ := t.Ranks()              // one Rank per device, sorted by rank id
//
// # Positions
//
// Parse walks the json.Decoder token stream and keeps the byte offset of
// every key and value, so each diagnostic names file:line:col (columns count
// bytes). Syntax errors are located by diag.JSONSyntaxError, a small scanner
// that agrees with encoding/json on what is valid JSON. Empty files, binary
// data (NUL bytes, invalid UTF-8), a byte order mark, nesting deeper than 32
// levels and files over MaxFileSize (16 MiB) are reported with a position
// too; Load returns an error only for files it cannot read.
//
// # Rules
//
// Errors (the table is invalid):
//   - version is "1.0" and status is "completed";
//   - server_count is a decimal string equal to the number of servers, and
//     server_list is not empty;
//   - every value is a JSON string: numbers such as "rank_id": 0 are errors,
//     because every documented rank table quotes its values and a checker
//     that let them through would pass files other tools may refuse (the
//     number's text is still used to check the remaining rules);
//   - no unknown keys (a likely misspelling is suggested), no duplicate keys,
//     no missing keys except host_nic_ip;
//   - device_id is an integer 0-7, unique within its server;
//   - a host has 1, 2, 4 or 8 devices; a cluster of several hosts has 8 on
//     every host (8×N); 2 or 4 devices on one host lie within one of the two
//     device networks, 0-3 or 4-7;
//   - rank_id values are integers, unique, covering 0 to N-1 for N devices;
//   - rank ids ascend with device_id inside a server, each server holds one
//     contiguous block, and blocks ascend in lexicographic (textual) order
//     of server_id, so "10.0.0.10" must come before "10.0.0.9";
//   - device_ip is a dotted-quad IPv4 address, unique in the table;
//     host_nic_ip is "reserve" or an IPv4 address, never one of another
//     server (simulated devices listen there: see Rank.ListenIP);
//   - server_id is an IPv4 address or a placeholder, and two servers never
//     share a real IPv4 address.
//
// Warnings (the table is valid, but needs attention before a cluster run):
//   - a placeholder server_id: four dot-separated parts, each "*" or a number
//     0-255, with at least one "*", as in the seeds' "10.*.*.*". Several
//     servers may share one placeholder (the seeds' 16-device table does);
//   - with several servers and any placeholder among them, the order of rank
//     ids against server_id order cannot be checked for the placeholders; it
//     is checked among the real addresses only and one warning says so;
//   - a missing host_nic_ip (the seeds always write "reserve").
//
// # Generation
//
// Generate writes tables for 1, 2, 4 or 8 devices on one host or 8 devices on
// each of several hosts, in the seeds' byte layout (see RankTable.Encode). The
// seeds scheme reproduces the documented example files byte for byte; the
// local scheme uses loopback addresses only, for devices simulated on this
// machine. See Scheme.
package ranktable
