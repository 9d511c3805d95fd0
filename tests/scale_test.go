package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestScale64To56ExampleIsValid checks examples/scale-64-to-56.yaml without
// running it (TestScale64To56ExampleRuns, behind the slow tag, does): the
// spec validates, both rank tables are what the command its comment names
// writes, and they hold 8 and 7 servers of 8 devices.
func TestScale64To56ExampleIsValid(t *testing.T) {
	w := newWorkspace(t)
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	r := w.run("validate", filepath.Join(examples, "scale-64-to-56.yaml"))
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, "warning") {
		t.Fatalf("validate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, table := range []struct {
		hosts int
		name  string
	}{{8, "rank_table_64pcs_local.json"}, {7, "rank_table_56pcs_local.json"}} {
		hosts := strconv.Itoa(table.hosts)
		if r := w.run("ranktable", "generate", "--hosts", hosts, "--scheme", "local", "-o", table.name); r.code != 0 {
			t.Fatalf("ranktable generate --hosts %s: exit %d\n%s", hosts, r.code, r.stderr)
		}
		want, err := os.ReadFile(filepath.Join(w.dir, table.name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(examples, table.name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("examples/%s differs from `mspipe ranktable generate --hosts %s --scheme local`", table.name, hosts)
		}
		servers, devices := strings.Count(string(got), `"server_id"`), strings.Count(string(got), `"device_id"`)
		if servers != table.hosts || devices != 8*table.hosts {
			t.Errorf("examples/%s: %d servers, %d devices; want %d and %d", table.name, servers, devices, table.hosts, 8*table.hosts)
		}
	}
}
