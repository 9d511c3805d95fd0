package auto

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadMachine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(`# a described target
flops: 256e12
memory: 32GiB
devices_per_server: 8
intra_server: {bandwidth: 30e9, latency: 10us}
inter_server:
  bandwidth: 12.5e9
  latency: 30us
`), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := LoadMachine(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if m != Ascend910() {
		t.Errorf("decoded %+v, want the ascend910 preset %+v", m, Ascend910())
	}
	json := `{"flops": 1e12, "memory": "1073741824", "devices_per_server": 4,
 "intra_server": {"bandwidth": 1e10, "latency": "500us"}, "inter_server": {"bandwidth": 1e9, "latency": "2ms"}}`
	if m, err := ParseMachine("m.json", []byte(json)); err != nil || m != roundMachineWith(4) {
		t.Errorf("JSON: %+v, %v; want %+v", m, err, roundMachineWith(4))
	}
}

func roundMachineWith(perServer int) Machine {
	m := roundMachine()
	m.DevicesPerServer = perServer
	return m
}

// Every mistake names the file, the line and column, and the key.
func TestParseMachineErrors(t *testing.T) {
	good := map[string]string{
		"flops": "flops: 1e12", "memory": "memory: 1GiB", "devices_per_server": "devices_per_server: 8",
		"intra_server": "intra_server: {bandwidth: 1e10, latency: 1ms}", "inter_server": "inter_server: {bandwidth: 1e9, latency: 2ms}",
	}
	file := func(replace map[string]string) string {
		var lines []string
		for _, k := range []string{"flops", "memory", "devices_per_server", "intra_server", "inter_server"} {
			line, ok := replace[k]
			if !ok {
				line = good[k]
			}
			if line != "" {
				lines = append(lines, line)
			}
		}
		return strings.Join(lines, "\n") + "\n" + replace["extra"]
	}
	for _, tc := range []struct {
		replace map[string]string
		want    string
	}{
		{map[string]string{"extra": "hbm: 32GiB\n"}, "m.yaml:6:1: hbm: unknown key (want devices_per_server, flops, inter_server, intra_server, memory)"},
		{map[string]string{"memory": ""}, "m.yaml:1:1: memory: missing"},
		{map[string]string{"flops": "flops: fast"}, `m.yaml:1:8: flops: "fast": want a positive number`},
		{map[string]string{"flops": "flops: -1"}, `m.yaml:1:8: flops: "-1": want a positive number`},
		{map[string]string{"memory": "memory: 32 gigs"}, `m.yaml:2:9: memory: "32 gigs": want a positive size`},
		{map[string]string{"devices_per_server": "devices_per_server: 0"}, `m.yaml:3:21: devices_per_server: "0": want a whole number from 1`},
		{map[string]string{"intra_server": "intra_server: {bandwidth: 1e10, latncy: 1ms}"}, "m.yaml:4:33: intra_server.latncy: unknown key (want bandwidth, latency)"},
		{map[string]string{"inter_server": "inter_server: {bandwidth: 1e9, latency: soon}"}, `m.yaml:5:41: inter_server.latency: "soon": want a duration`},
		{map[string]string{"inter_server": "inter_server: 1e9"}, "m.yaml:5:15: inter_server: want a mapping of bandwidth, latency"},
		{map[string]string{"extra": "flops: 2e12\n"}, "m.yaml:6:1: flops: given twice"},
	} {
		_, err := ParseMachine("m.yaml", []byte(file(tc.replace)))
		if !errors.Is(err, ErrMachine) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want ErrMachine with %q", tc.replace, err, tc.want)
		}
	}
	if _, err := ParseMachine("m.yaml", nil); err == nil || !strings.Contains(err.Error(), "m.yaml: empty") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := LoadMachine(context.Background(), filepath.Join(t.TempDir(), "none.yaml")); !errors.Is(err, ErrMachine) || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("missing file: %v", err)
	}
}
