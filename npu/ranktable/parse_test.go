package ranktable

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/diag"
)

func TestPositions(t *testing.T) {
	data, err := os.ReadFile("testdata/valid/rank_table_8pcs.json")
	if err != nil {
		t.Fatal(err)
	}
	table, problems := Parse("8pcs.json", data)
	if problems.HasErrors() {
		t.Fatal(problems.Err())
	}
	// Line 11 is `                {"device_id": "3","device_ip": "192.4.27.6","rank_id": "3"},`:
	// 16 spaces, '{' at column 17, the rank_id value at column 72.
	tests := []struct {
		path      string
		line, col int
	}{
		{"", 1, 1},
		{"version", 2, 16},
		{"server_count", 3, 21},
		{"server_list", 4, 20},
		{"server_list[0]", 5, 9},
		{"server_list[0].server_id", 6, 26},
		{"server_list[0].device", 7, 23},
		{"server_list[0].device[3]", 11, 17},
		{"server_list[0].device[3].device_id", 11, 31},
		{"server_list[0].device[3].device_ip", 11, 48},
		{"server_list[0].device[3].rank_id", 11, 72},
		{"server_list[0].host_nic_ip", 16, 29},
		{"status", 19, 15},
	}
	for _, tt := range tests {
		pos, ok := table.Position(tt.path)
		if !ok || pos.Line != tt.line || pos.Col != tt.col {
			t.Errorf("Position(%q) = %v, %v; want %d:%d", tt.path, pos, ok, tt.line, tt.col)
			continue
		}
		// The offset must point at the first byte of the value.
		if c := data[pos.Offset]; !strings.ContainsRune(`{["`, rune(c)) {
			t.Errorf("Position(%q) offset %d points at %q", tt.path, pos.Offset, c)
		}
	}
	if _, ok := table.Position("server_list[1]"); ok {
		t.Error("Position of a missing server reported ok")
	}
}

// TestSyntaxErrorPositions covers the cases where json.SyntaxError.Offset is
// not the offending byte (inside literals, strings and numbers).
func TestSyntaxErrorPositions(t *testing.T) {
	tests := []struct {
		name, in string
		pos      string
		msg      string
	}{
		{"bad literal", `{"a": tru}`, "1:7", `expected a value, found "tru"`},
		{"control char", "{\"a\": \"x\x01\"}", "1:9", "control character U+0001 in string must be escaped"},
		{"bad number", `{"a": -}`, "1:8", "invalid number: expected a digit, found '}'"},
		{"bad exponent", `{"a": 1e+}`, "1:10", "invalid number: expected a digit, found '}'"},
		{"missing colon", `{"a" "b"}`, "1:6", `expected ':' after object key, found '"'`},
		{"missing comma", "{\"a\": \"b\"\n \"c\": \"d\"}", "2:2", `expected ',' or '}' after object member, found '"'`},
		{"unquoted key", `{version: "1.0"}`, "1:2", `expected a quoted object key, found "version"`},
		{"single quotes", `{'version': '1.0'}`, "1:2", `expected a quoted object key, found '\''`},
		{"trailing comma", `{"a": "b",}`, "1:10", `trailing comma before '}'`},
		{"bad escape", `{"a": "\q"}`, "1:8", `invalid escape "\\q" in string`},
		{"bad unicode escape", `{"a": "\u12x4"}`, "1:8", `invalid \u escape`},
		{"truncated", `{"a": [`, "1:8", "expected a value, found end of file"},
		{"truncated string", `{"a": "b`, "1:7", "unterminated string, found end of file"},
		{"two objects", "{}\n{}", "2:1", "expected end of file after the top-level value, found '{'"},
		{"leading zero", `{"a": 01}`, "1:8", `expected ',' or '}' after object member, found '1'`},
		{"unicode garbage", `{"a": ü}`, "1:7", `expected a value, found 'ü'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, problems := Parse("x.json", []byte(tt.in))
			if table != nil {
				t.Errorf("table returned for invalid JSON")
			}
			if len(problems) != 1 {
				t.Fatalf("got %d problems, want 1:\n%s", len(problems), formatProblems(problems))
			}
			p := problems[0]
			if p.Where() != "x.json:"+tt.pos || !strings.Contains(p.Message, tt.msg) || p.Severity != diag.Error || p.Code != CodeSyntax {
				t.Errorf("got %v (code %q)\nwant x.json:%s: error: ...%s... (code %q)", p, p.Code, tt.pos, tt.msg, CodeSyntax)
			}
			if json.Valid([]byte(tt.in)) {
				t.Errorf("test input is valid JSON")
			}
		})
	}
}

func TestUnknownKeySuggestions(t *testing.T) {
	tests := []struct {
		key  string
		keys []string
		want string
	}{
		{"sever_count", tableKeys(), ` (did you mean "server_count"?)`},
		{"Version", tableKeys(), ` (did you mean "version"?)`},
		{"devices", serverKeys(), ` (did you mean "device"?)`},
		{"deviceip", deviceKeys(), ` (did you mean "device_ip"?)`},
		{"rank_id", serverKeys(), ` ("rank_id" belongs in a device object)`},
		{"server_list", serverKeys(), ` ("server_list" belongs in the top level)`},
		{"rank_size", tableKeys(), ""},
	}
	for _, tt := range tests {
		if got := suggest(tt.key, tt.keys); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.json")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file: Load must refuse it from its size, without reading it.
	if err := f.Truncate(MaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()

	tests := []struct {
		name, path string
		is         error
		msg        string
	}{
		{"missing", filepath.Join(dir, "nope.json"), fs.ErrNotExist, "read rank table " + filepath.Join(dir, "nope.json")},
		{"directory", dir, nil, "is a directory"},
		{"huge", huge, ErrTooLarge, "16777217 bytes, the limit is 16 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, problems, err := Load(tt.path)
			if err == nil || table != nil || problems != nil {
				t.Fatalf("Load(%s) = %v, %v, %v; want an error", tt.path, table, problems, err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	data := make([]byte, MaxFileSize+1)
	table, problems := Parse("big.json", data)
	if table != nil || len(problems) != 1 || problems[0].String() != "big.json:1:1: error: file is 16777217 bytes, larger than the 16 MiB limit for a rank table" {
		t.Fatalf("got %v, %s", table, formatProblems(problems))
	}
}

// TestProblemsErr checks the error a caller gets for an invalid table: the
// first error, how many more, and every diagnostic reachable with errors.As.
func TestProblemsErr(t *testing.T) {
	data, err := os.ReadFile("testdata/invalid/twelve_devices.json")
	if err != nil {
		t.Fatal(err)
	}
	_, problems := Check("twelve.json", data)
	err = problems.Err()
	want := "twelve.json:7:23: error: server_list[0] has 12 devices; HCCL supports 1, 2, 4 or 8 devices on one host (and 4 more errors)"
	if err == nil || err.Error() != want {
		t.Fatalf("Err() = %v\nwant     %q", err, want)
	}
	var d diag.Diagnostic
	if !errors.As(err, &d) || d.Line != 7 || d.Column != 23 {
		t.Errorf("errors.As(Diagnostic) = %v", d)
	}
	warnOnly := diag.List{{File: "x", Severity: diag.Warning, Message: "w"}}
	if warnOnly.Err() != nil {
		t.Error("warnings alone made Err() non-nil")
	}
}

func TestRanks(t *testing.T) {
	table, problems, err := Load("testdata/valid/rank_table_16pcs.json")
	if err != nil || problems.HasErrors() {
		t.Fatal(err, problems.Err())
	}
	ranks, err := table.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	if len(ranks) != 16 || table.RankSize() != 16 {
		t.Fatalf("got %d ranks, RankSize %d; want 16", len(ranks), table.RankSize())
	}
	for i, r := range ranks {
		if r.RankID != i || r.HostIndex != i/8 || r.DeviceID != i%8 || r.ServerID != "10.*.*.*" {
			t.Errorf("rank %d = %+v", i, r)
		}
	}
	if got := ranks[9].DeviceIP; got != "192.2.27.8" {
		t.Errorf("rank 9 device_ip = %s, want 192.2.27.8", got)
	}
	// Ranks sorts by rank id, not file order.
	shuffled := &RankTable{ServerList: []Server{{ServerID: "10.0.0.1", Device: []Device{
		{DeviceID: "1", DeviceIP: "192.2.27.6", RankID: "1"},
		{DeviceID: "0", DeviceIP: "192.1.27.6", RankID: "0"},
	}}}}
	ranks, err = shuffled.Ranks()
	if err != nil || ranks[0].DeviceID != 0 || ranks[1].DeviceID != 1 {
		t.Errorf("Ranks() = %+v, %v", ranks, err)
	}
	shuffled.ServerList[0].Device[0].RankID = "x"
	if _, err := shuffled.Ranks(); err == nil || !strings.Contains(err.Error(), `server_list[0].device[0]: rank_id "x"`) {
		t.Errorf("Ranks() on a bad rank_id: %v", err)
	}
}

// TestValidateInMemory checks tables built in code: no positions, so
// problems name the JSON path instead.
func TestValidateInMemory(t *testing.T) {
	table := &RankTable{Version: "1.0", ServerCount: "1", Status: "completed", ServerList: []Server{{
		ServerID: "10.0.0.1", HostNicIP: "reserve", Device: []Device{
			{DeviceID: "0", DeviceIP: "192.1.27.6", RankID: "0"},
			{DeviceID: "1", DeviceIP: "192.1.27.6", RankID: "1"},
		},
	}}}
	got := formatProblems(table.Validate())
	want := `error: server_list[0].device[1].device_ip: duplicate device_ip "192.1.27.6" (first at server_list[0].device[0].device_ip); every device needs its own IP` + "\n"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestValidateRules(t *testing.T) {
	ok := func(id string, ranks ...string) Server {
		s := Server{ServerID: id, HostNicIP: "reserve"}
		for d, r := range ranks {
			s.Device = append(s.Device, Device{DeviceID: itoa(d), DeviceIP: "192.168.9." + itoa(d+1), RankID: r})
		}
		return s
	}
	eight := func(id string, base int) Server {
		ranks := make([]string, 8)
		for i := range ranks {
			ranks[i] = itoa(base + i)
		}
		s := ok(id, ranks...)
		for d := range s.Device {
			s.Device[d].DeviceIP = "192.168." + itoa(base/8) + "." + itoa(d+1)
		}
		return s
	}
	tests := []struct {
		name    string
		servers []Server
		want    string // substring of the only problem; "" for none
		sev     diag.Severity
	}{
		{"single host in order", []Server{eight("10.0.0.1", 0)}, "", 0},
		{"three hosts in order", []Server{eight("10.0.0.1", 0), eight("10.0.0.2", 8), eight("10.0.0.3", 16)}, "", 0},
		{"file order differs from rank order", []Server{eight("10.0.0.2", 8), eight("10.0.0.1", 0)}, "", 0},
		{"textual order 10 before 9", []Server{eight("10.0.0.10", 0), eight("10.0.0.9", 8)}, "", 0},
		{"placeholder among real ids", []Server{eight("10.0.0.1", 0), eight("10.*.*.*", 8)}, "not checked for placeholder", diag.Warning},
		{"real ids out of order around a placeholder", []Server{eight("10.0.0.2", 0), eight("10.*.*.*", 8), eight("10.0.0.1", 16)}, `server_id "10.0.0.1" holds rank ids 16-23 but sorts before "10.0.0.2"`, diag.Error},
		{"ipv6 server", []Server{eight("::1", 0)}, "is neither an IPv4 address nor a placeholder", diag.Error},
		{"bad placeholder", []Server{eight("10.*", 0)}, "is neither an IPv4 address nor a placeholder", diag.Error},
		{"devices 4-7 alone", []Server{{ServerID: "10.0.0.1", HostNicIP: "reserve", Device: []Device{
			{DeviceID: "4", DeviceIP: "192.1.27.7", RankID: "0"}, {DeviceID: "5", DeviceIP: "192.2.27.7", RankID: "1"},
			{DeviceID: "6", DeviceIP: "192.3.27.7", RankID: "2"}, {DeviceID: "7", DeviceIP: "192.4.27.7", RankID: "3"}}}}, "", 0},
		{"devices 3 and 4", []Server{{ServerID: "10.0.0.1", HostNicIP: "reserve", Device: []Device{
			{DeviceID: "3", DeviceIP: "192.4.27.6", RankID: "0"}, {DeviceID: "4", DeviceIP: "192.1.27.7", RankID: "1"}}}}, "devices 3-4 span both device networks", diag.Error},
		{"leading zero rank", []Server{ok("10.0.0.1", "00")}, `rank_id "00" is not a non-negative integer (write it without leading zeros)`, diag.Error},
		{"negative rank", []Server{ok("10.0.0.1", "-1")}, `rank_id "-1" is not a non-negative integer`, diag.Error},
		{"host nic ip", []Server{{ServerID: "10.0.0.1", HostNicIP: "eth0", Device: []Device{{DeviceID: "0", DeviceIP: "192.1.27.6", RankID: "0"}}}}, `host_nic_ip "eth0" is neither "reserve" nor an IPv4 address`, diag.Error},
		{"unspecified device ip", []Server{{ServerID: "10.0.0.1", HostNicIP: "reserve", Device: []Device{{DeviceID: "0", DeviceIP: "0.0.0.0", RankID: "0"}}}}, `device_ip "0.0.0.0" is the unspecified address`, diag.Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := &RankTable{Version: "1.0", ServerCount: itoa(len(tt.servers)), Status: "completed", ServerList: tt.servers}
			problems := table.Validate()
			if tt.want == "" {
				if len(problems) != 0 {
					t.Fatalf("unexpected problems:\n%s", formatProblems(problems))
				}
				return
			}
			found := false
			for _, p := range problems {
				found = found || p.Severity == tt.sev && strings.Contains(p.Message, tt.want)
			}
			wantErrs := 0
			if tt.sev == diag.Error {
				wantErrs = 1
			}
			if errs, _ := problems.Count(); !found || errs != wantErrs {
				t.Fatalf("got:\n%swant %d error(s) and a %v containing %q", formatProblems(problems), wantErrs, tt.sev, tt.want)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
