package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ranktable"
)

// runRanktable runs `mspipe ranktable ARGS...` in-process.
func runRanktable(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(context.Background(), append([]string{"ranktable"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

const seedTables = "../../../../npu/ranktable/testdata/valid/"

// writeTable writes content to name in a fresh directory and returns the path.
func writeTable(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// threeDevices is invalid: 3 devices on one host, and one device_id 9.
const threeDevices = `{
    "version": "1.0",
    "server_count": "1",
    "server_list": [
        {
            "server_id": "10.0.0.1",
            "device": [
                {"device_id": "0","device_ip": "192.1.27.6","rank_id": "0"},
                {"device_id": "1","device_ip": "192.2.27.6","rank_id": "1"},
                {"device_id": "9","device_ip": "192.3.27.6","rank_id": "2"}],
             "host_nic_ip": "reserve"
        }
    ],
    "status": "completed"
}
`

func TestRanktableValidateText(t *testing.T) {
	dir := t.TempDir()
	bad := writeTable(t, dir, "bad.json", threeDevices)
	tests := []struct {
		name     string
		args     []string
		code     int
		stderr   string
		noStdout bool
	}{
		{
			name: "seed table with placeholder warning",
			args: []string{"validate", seedTables + "rank_table_8pcs.json"},
			code: ExitOK,
			stderr: seedTables + `rank_table_8pcs.json:6:26: warning: placeholder server_id "10.*.*.*": replace with the host's IP before running on a cluster
1 rank table checked: all valid, 1 warning
`,
		},
		{
			name: "invalid table",
			args: []string{"validate", bad},
			code: ExitFailed,
			stderr: bad + `:7:23: error: server_list[0] has 3 devices; HCCL supports 1, 2, 4 or 8 devices on one host
` + bad + `:10:31: error: device_id "9" is out of range: a host has devices 0-7
1 rank table checked: 1 invalid, 2 errors
`,
		},
		{
			name: "valid and invalid",
			args: []string{"validate", seedTables + "rank_table_2pcs.json", bad},
			code: ExitFailed,
			stderr: seedTables + `rank_table_2pcs.json:6:26: warning: placeholder server_id "10.*.*.*": replace with the host's IP before running on a cluster
` + bad + `:7:23: error: server_list[0] has 3 devices; HCCL supports 1, 2, 4 or 8 devices on one host
` + bad + `:10:31: error: device_id "9" is out of range: a host has devices 0-7
2 rank tables checked: 1 invalid, 2 errors, 1 warning
`,
		},
		{
			name: "missing file is exit 2 even next to an invalid one",
			args: []string{"validate", bad, filepath.Join(dir, "nope.json")},
			code: ExitUsage,
			stderr: bad + `:7:23: error: server_list[0] has 3 devices; HCCL supports 1, 2, 4 or 8 devices on one host
` + bad + `:10:31: error: device_id "9" is out of range: a host has devices 0-7
` + filepath.Join(dir, "nope.json") + `: error: open: no such file or directory
2 rank tables checked: 1 unreadable, 1 invalid, 2 errors
`,
		},
		{
			name: "directory",
			args: []string{"validate", dir},
			code: ExitUsage,
			stderr: dir + ": error: read rank table " + dir + ": is a directory, not a regular file\n" +
				"1 rank table checked: 1 unreadable\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runRanktable(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			// Problems go to stdout, the summary line to stderr.
			if !strings.HasSuffix(tt.stderr, stderr) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr = %q, want only the summary line", stderr)
			}
			if got := stdout + stderr; got != tt.stderr {
				t.Errorf("output:\n%s\nwant:\n%s", got, tt.stderr)
			}
		})
	}
}

func TestRanktableValidateFormats(t *testing.T) {
	dir := t.TempDir()
	bad := writeTable(t, dir, "bad,1.json", threeDevices)
	good := seedTables + "rank_table_16pcs.json"

	code, stdout, stderr := runRanktable(t, "validate", "--format", "github", bad, good)
	if code != ExitFailed {
		t.Errorf("github: exit %d, want 1", code)
	}
	// Commas and colons in a file name are escaped in the file= property.
	escaped := strings.NewReplacer(",", "%2C", ":", "%3A").Replace(bad)
	wantGitHub := "::error file=" + escaped + ",line=7,col=23::server_list[0] has 3 devices; HCCL supports 1, 2, 4 or 8 devices on one host\n" +
		"::error file=" + escaped + `,line=10,col=31::device_id "9" is out of range: a host has devices 0-7` + "\n" +
		"::warning file=" + good + ",line=4,col=20::rank order against lexicographic server_id order is not checked for placeholder server_ids; validate again once they are the hosts' IPs\n" +
		"::warning file=" + good + `,line=6,col=26::placeholder server_id "10.*.*.*": replace with the host's IP before running on a cluster` + "\n" +
		"::warning file=" + good + `,line=19,col=26::placeholder server_id "10.*.*.*": replace with the host's IP before running on a cluster` + "\n"
	if stdout != wantGitHub {
		t.Errorf("github stdout:\n%s\nwant:\n%s", stdout, wantGitHub)
	}
	if want := "2 rank tables checked: 1 invalid, 2 errors, 3 warnings\n"; stderr != want {
		t.Errorf("github stderr %q, want %q", stderr, want)
	}

	code, stdout, stderr = runRanktable(t, "validate", "--format", "json", good, bad)
	if code != ExitFailed || stderr != "" {
		t.Errorf("json: exit %d, stderr %q", code, stderr)
	}
	var report struct {
		Valid bool
		Files []struct {
			File     string
			Valid    bool
			Problems []struct {
				File, Severity, Message string
				Line, Col               int
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("json output: %v\n%s", err, stdout)
	}
	if report.Valid || len(report.Files) != 2 || !report.Files[0].Valid || report.Files[1].Valid {
		t.Fatalf("json report: %+v", report)
	}
	if n := len(report.Files[0].Problems); n != 3 {
		t.Errorf("16pcs: %d problems, want 3 warnings", n)
	}
	p := report.Files[1].Problems[1]
	if p.File != bad || p.Line != 10 || p.Col != 31 || p.Severity != "error" || p.Message != `device_id "9" is out of range: a host has devices 0-7` {
		t.Errorf("json problem: %+v", p)
	}

	code, _, stderr = runRanktable(t, "validate", "--format", "xml", good)
	if code != ExitUsage || !strings.Contains(stderr, `unknown format "xml"`) {
		t.Errorf("bad format: exit %d, stderr %q", code, stderr)
	}
	code, _, _ = runRanktable(t, "validate")
	if code != ExitUsage {
		t.Errorf("no files: exit %d, want 2", code)
	}
}

func TestRanktableGenerate(t *testing.T) {
	seed := func(name string) string {
		data, err := os.ReadFile(seedTables + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"default is the 8-device seed", nil, seed("rank_table_8pcs.json")},
		{"two devices", []string{"--devices", "2"}, seed("rank_table_2pcs.json")},
		{"two hosts", []string{"--hosts", "2"}, seed("rank_table_16pcs.json")},
		{"placeholder servers", []string{"--servers", "10.*.*.*,10.*.*.*", "--device-range", "0-7"}, seed("rank_table_16pcs.json")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runRanktable(t, append([]string{"generate"}, tt.args...)...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if stdout != tt.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, tt.want)
			}
			if !strings.Contains(stderr, `note: server_id "10.*.*.*" is a placeholder`) {
				t.Errorf("no placeholder note on stderr: %q", stderr)
			}
		})
	}
}

func TestRanktableGenerateToFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "rank_table_4pcs.json")
	code, stdout, stderr := runRanktable(t, "generate", "--device-range", "4-7", "--scheme", "local", "-o", out)
	if code != ExitOK || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if want := "wrote " + out + ": 1 server, 4 ranks\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	table, problems, err := ranktable.Load(out)
	if err != nil || len(problems) != 0 {
		t.Fatalf("generated file: %v %v", err, problems)
	}
	ranks, err := table.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range ranks {
		if r.ServerID != "127.0.0.1" || r.DeviceID != 4+i || r.DeviceIP != "127.1.0."+strconv.Itoa(5+i) {
			t.Errorf("rank %d = %+v", i, r)
		}
	}
	// The file validates through the CLI too, without warnings.
	code, _, stderr = runRanktable(t, "validate", out)
	if code != ExitOK || stderr != "1 rank table checked: all valid\n" {
		t.Errorf("validate generated: exit %d, %q", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestRanktableGenerateErrors(t *testing.T) {
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"--devices", "3"}, "3 devices per host: HCCL supports 1, 2, 4 or 8"},
		{[]string{"--device-range", "2-5"}, "devices 2-5 span both device networks"},
		{[]string{"--hosts", "2", "--devices", "4"}, "a multi-host cluster needs 8 devices on every host"},
		{[]string{"--devices", "8", "--device-range", "0-7"}, "[device-range devices] were all set"},
		{[]string{"--servers", "10.0.0.1", "--hosts", "2"}, "[hosts servers] were all set"},
		{[]string{"--scheme", "local", "--servers", "10.0.0.1"}, "loopback addresses"},
		{[]string{"--scheme", "cloud"}, `unknown scheme "cloud"`},
		{[]string{"extra"}, `unknown command "extra"`},
		{[]string{"-o", filepath.Join(t.TempDir(), "missing-dir", "x.json")}, "write rank table"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runRanktable(t, append([]string{"generate"}, tt.args...)...)
			if code != ExitUsage || stdout != "" || !strings.Contains(stderr, tt.msg) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 mentioning %q", code, stdout, stderr, tt.msg)
			}
		})
	}
}
