package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/diag"
)

// fakeTables answers Options.CheckRankTable by file name, recording the
// paths it was asked for.
type fakeTables struct{ asked []string }

func (f *fakeTables) check(path string) (int, diag.List, error) {
	f.asked = append(f.asked, path)
	switch filepath.Base(path) {
	case "eight.json":
		return 8, diag.List{{File: path, Line: 6, Column: 26, Severity: diag.Warning, Message: "placeholder server_id"}}, nil
	case "bad.json":
		return 3, diag.List{{File: path, Line: 7, Column: 23, Message: "server_list[0] has 3 devices"}}, nil
	case "dir.json":
		return 0, nil, errors.New("read rank table dir.json: is a directory")
	}
	return 0, nil, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
}

func TestClusterRankTables(t *testing.T) {
	tests := []struct {
		name    string
		cluster string
		want    []string // problems in order, as printed
	}{
		{"valid table, warnings kept", `{rank_table: eight.json}`,
			[]string{"specs/eight.json:6:26: warning: placeholder server_id"}},
		{"devices agree", `{rank_table: eight.json, devices: 8}`,
			[]string{"specs/eight.json:6:26: warning: placeholder server_id"}},
		{"devices disagree", `{rank_table: eight.json, devices: 4}`, []string{
			"specs/eight.json:6:26: warning: placeholder server_id",
			"{4}: error: stages.s.cluster.devices: 4 does not match the 8 devices of rank table eight.json",
		}},
		{"invalid table", `{rank_table: bad.json}`, []string{
			"specs/bad.json:7:23: error: server_list[0] has 3 devices",
			"{bad.json}: error: stages.s.cluster.rank_table: bad.json is not a valid rank table",
		}},
		{"missing table", `{rank_table: none.json}`, []string{
			"{none.json}: error: stages.s.cluster.rank_table: file specs/none.json not found (the path is relative to the spec file)",
		}},
		{"unreadable table", `{rank_table: dir.json}`, []string{
			"{dir.json}: error: stages.s.cluster.rank_table: read rank table dir.json: is a directory",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "version: 1\nname: c\nstages:\n  s: {uses: gen, cluster: " + tt.cluster + "}\n"
			p, errs := Parse(filepath.Join("specs", "p.yaml"), []byte(src))
			tables := &fakeTables{}
			errs = append(errs, Validate(p, catalog, Options{CheckRankTable: tables.check})...)
			var got []string
			for _, d := range errs {
				got = append(got, d.String())
			}
			want := withPositions(t, src, strings.Join(tt.want, "\n"), "specs/p.yaml")
			if strings.Join(got, "\n") != want {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
			}
			if len(tables.asked) != 1 || !strings.HasPrefix(tables.asked[0], "specs"+string(filepath.Separator)) {
				t.Errorf("rank tables asked for: %v, want one path joined with the spec's directory", tables.asked)
			}
		})
	}
	// Without the option, rank tables are not read.
	p, errs := Parse("p.yaml", []byte("version: 1\nname: c\ncluster: {rank_table: none.json}\nstages: {s: {uses: gen}}\n"))
	if errs = append(errs, Validate(p, catalog, Options{})...); len(errs) != 0 {
		t.Errorf("no CheckRankTable: %v", errs)
	}
}

// TestDescribeInMessages checks how wrong values are named in messages.
func TestDescribeInMessages(t *testing.T) {
	tests := []struct{ value, want string }{
		{"{a: 1}", "a mapping"},
		{"[1]", "a list"},
		{"7", "the integer 7"},
		{"0.5", "the number 0.5"},
		{"true", "the boolean true"},
		{"~", "nothing (null)"},
		{"!!binary aGk=", `"aGk="`},
	}
	for _, tt := range tests {
		src := "version: 1\nname: " + tt.value + "\nstages: {s: {uses: gen}}\n"
		errs := check(src)
		want := "p.yaml:2:7: error: name: expected a string, got " + tt.want
		if len(errs) != 1 || errs[0].String() != want {
			t.Errorf("name: %s\ngot  %v\nwant %s", tt.value, errs, want)
		}
	}
	long := strings.Repeat("x", 50)
	errs := check("version: " + long + "\nname: n\nstages: {s: {uses: gen}}\n")
	want := `p.yaml:1:10: error: version: expected an integer, got the string "` + long[:40] + `..."`
	if len(errs) != 1 || errs[0].String() != want {
		t.Errorf("long string:\ngot  %v\nwant %s", errs, want)
	}
}

// withPositions replaces each "{marker}:" in want by file:line:col of the
// marker's only occurrence in src.
func withPositions(t *testing.T, src, want, file string) string {
	t.Helper()
	for {
		i := strings.Index(want, "{")
		if i < 0 {
			return want
		}
		j := strings.Index(want[i:], "}:") + i
		pos := strings.Replace(posOf(t, src, want[i+1:j]), "p.yaml", file, 1)
		want = want[:i] + pos + want[j+1:]
	}
}

// TestDecodeShapes covers the forms each section accepts and refuses.
func TestDecodeShapes(t *testing.T) {
	tests := []struct {
		name, stage string
		want        string // the only problem, "" for none
	}{
		{"env values are strings", `{uses: gen, env: {A: x, B: 1}}`, ""},
		{"env null value", `{uses: gen, env: {A: ~}}`, "{~}}: error: stages.s.env.A: expected a string, got nothing (null)"},
		{"env not a mapping", `{uses: gen, env: [A]}`, "{[A]}: error: stages.s.env: expected a mapping, got a list"},
		{"with null", `{uses: gen, with: ~}`, ""},
		{"with a list", `{uses: gen, with: [1]}`, "{[1]}: error: stages.s.with: expected a mapping of inputs, got a list"},
		{"needs as one string", `{uses: gen, needs: t}`, ""},
		{"needs a number", `{uses: gen, needs: [1]}`, "{1]}: error: stages.s.needs: expected a string, got the integer 1"},
		{"retry mapping", `{uses: gen, retry: {max_attempts: 3, backoff: 2s}}`, ""},
		{"retry number", `{uses: gen, retry: 3}`, ""},
		{"retry string", `{uses: gen, retry: often}`, `{often}: error: stages.s.retry: expected an integer, got the string "often"`},
		{"retry unknown key", `{uses: gen, retry: {tries: 3}}`, `{tries}: error: stages.s.retry: unknown key "tries"`},
		{"outputs short form", `{uses: gen, outputs: {acc: float}}`, ""},
		{"outputs long form", `{uses: gen, outputs: {acc: {type: float, description: accuracy}}}`, ""},
		{"outputs without type", `{uses: gen, outputs: {acc: {description: accuracy}}}`, ""},
		{"output name", `{uses: gen, outputs: {a-b: float}}`, "{a-b}: error: stages.s.outputs.a-b: an output name must be letters, digits and _"},
		{"output conflicts with the plugin's", `{uses: gen, outputs: {n: string}}`, "{n: string}: error: stages.s.outputs.n: stage gen declares this output as int, not string"},
		{"integer with underscores", `{uses: gen, retry: 1_0}`, ""},
		{"empty stages", ``, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "version: 1\nname: shapes\nstages:\n  s: " + tt.stage + "\n  t: {uses: gen}\n"
			if tt.stage == "" {
				src = "version: 1\nname: shapes\nstages: {}\n"
				tt.want = "{{}}: error: stages: a pipeline needs at least one stage"
			}
			errs := check(src)
			want := withPositions(t, src, tt.want, "p.yaml")
			switch {
			case want == "" && len(errs) != 0:
				t.Errorf("unexpected problems: %v", errs)
			case want != "" && (len(errs) != 1 || !strings.HasPrefix(errs[0].String(), want)):
				t.Errorf("got:\n%s\nwant one problem starting %q", lines(errs), want)
			}
		})
	}
}
