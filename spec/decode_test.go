package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/diag"
)

// posOf is the "p.yaml:line:col" of the first occurrence of marker in src,
// counted independently of the decoder.
func posOf(t *testing.T, src, marker string) string {
	t.Helper()
	i := strings.Index(src, marker)
	if i < 0 || strings.Count(src, marker) != 1 {
		t.Fatalf("bad test: marker %q occurs %d times", marker, strings.Count(src, marker))
	}
	line := strings.Count(src[:i], "\n") + 1
	col := i - strings.LastIndex(src[:i], "\n")
	return fmt.Sprintf("p.yaml:%d:%d", line, col)
}

// TestProblemPositions checks that every problem in a spec with many of
// them is reported, once, at the file:line:col of the value at fault.
func TestProblemPositions(t *testing.T) {
	src := `version: 1
name: positions
colour: blue
params:
  n: {type: integer, default: 1}
  ok: {type: int, default: "three"}
  bad-name: {type: int}
  nt: {default: 2}
cluster: {devices: 3}
stages:
  a:
    uses: gen
    timeout: soon
    retry: 500
  b:
    uses: use
    needs: [b, ghost, a, a]
    with: {count: "${{ params.ok + stages.a.outputs.missing }}"}
    sha256: abc
  c: {needs: a}
  d-x: {uses: Gen!}
  e: {uses: gen, retry: {max_attempts: 0, backoff: -1s}, outputs: {loss: {type: decimal}}}
`
	want := []struct{ marker, msg string }{
		{"colour", `spec: unknown key "colour"`},
		{"integer", `params.n.type: unknown type "integer"`},
		{`"three"`, "params.ok.default: "},
		{"bad-name", "params.bad-name: a param name must be letters, digits and _"},
		{"nt: {default", `params.nt: missing required key "type"`},
		{"3}", "cluster.devices: HCCL supports 1, 2, 4 or 8 devices on one host, not 3"},
		{"soon", `stages.a.timeout: "soon" is not a positive duration`},
		{"500", "stages.a.retry: max attempts must be between 1 and 100, got 500"},
		{"b, ghost", "stages.b.needs: a stage cannot need itself"},
		{"ghost", `stages.b.needs: unknown stage "ghost"`},
		{"a]", `stages.b.needs: "a" is listed twice`},
		{"missing", `stages.b.with.count: stage "a" has no output "missing"`},
		{"abc", "stages.b.sha256: expected 64 lower-case hex digits"},
		{"c:", `stages.c: missing required key "uses"`},
		{"d-x", "stages.d-x: a stage id must be letters, digits and _"},
		{"Gen!", `stages.d-x.uses: "Gen!" is neither a stage name`},
		{"Gen!", `stages.d-x.uses: unknown stage (did you mean "gen"?)`},
		{"0, backoff", "stages.e.retry.max_attempts: must be between 1 and 100, got 0"},
		{"-1s", `stages.e.retry.backoff: "-1s" is not a positive duration`},
		{"decimal", `stages.e.outputs.loss: unknown type "decimal"`},
	}
	errs := check(src)
	errs.Sort() // as the CLI does: Parse and Validate each report in their own order
	var got []string
	for _, d := range errs {
		got = append(got, d.String())
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(errs), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if p := posOf(t, src, w.marker); errs[i].Where() != p || !strings.Contains(errs[i].Message, w.msg) {
			t.Errorf("problem %d = %s\nwant at %s containing %q", i, errs[i], p, w.msg)
		}
	}
}

// TestDecodeLimits checks the bounds that keep hostile files cheap: each is
// reported once, with the code that tells the CLI not to validate further.
func TestDecodeLimits(t *testing.T) {
	// Nine levels of ten aliases each: 10^9 nodes once expanded.
	bomb := "version: 1\nname: bomb\nstages:\n  s:\n    uses: gen\n    with:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 9; i++ {
		bomb += fmt.Sprintf("      a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	deep := "version: 1\nname: deep\nstages:\n  s:\n    uses: gen\n    with:\n      v: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "\n"
	tests := []struct {
		name  string
		data  []byte
		code  string
		where string
		msg   string
	}{
		{"over MaxFileSize", make([]byte, MaxFileSize+1), CodeTooLarge, "p.yaml",
			fmt.Sprintf("file is %d bytes, larger than the %d-byte limit for a spec", MaxFileSize+1, MaxFileSize)},
		{"NUL byte", []byte("version: 1\nna\x00me: x\n"), CodeNotText, "p.yaml:2:3", "not a text file: byte 0x00"},
		{"invalid UTF-8", []byte("version: 1\nname: \xff\n"), CodeNotText, "p.yaml:2:7", "byte 0xff is not valid UTF-8"},
		{"empty", []byte(" \n\n"), CodeEmpty, "p.yaml:1:1", "empty spec"},
		{"null document", []byte("~\n"), CodeEmpty, "p.yaml:1:1", "empty spec"},
		{"syntax", []byte("version: 1\nname: [x\n"), CodeSyntax, "", "yaml: did not find expected ',' or ']'"},
		{"alias bomb", []byte(bomb), CodeTooComplex, "", "spec expands to more than 100000 YAML nodes"},
		{"nesting", []byte(deep), CodeTooComplex, "", "nested deeper than 64 levels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, errs := Parse("p.yaml", tt.data)
			var found *diag.Diagnostic
			for i := range errs {
				if errs[i].Code == tt.code {
					if found != nil {
						t.Fatalf("%s reported twice: %v", tt.code, errs)
					}
					found = &errs[i]
				}
			}
			if found == nil || !strings.Contains(found.Message, tt.msg) || (tt.where != "" && found.Where() != tt.where) {
				t.Fatalf("got %v, want a %s problem at %q containing %q", errs, tt.code, tt.where, tt.msg)
			}
			if Decoded(errs) {
				t.Error("Decoded = true after a limit was hit")
			}
			if tt.code == CodeTooComplex {
				// Nothing walks the aliases again: Validate is silent and
				// a resolver is refused.
				if more := Validate(p, catalog, Options{}); len(more) != 0 {
					t.Errorf("Validate after %s: %v", tt.code, more)
				}
				if _, err := NewResolver(p, catalog); !errors.Is(err, ErrTooComplex) {
					t.Errorf("NewResolver = %v, want ErrTooComplex", err)
				}
			}
		})
	}
}

func TestIntegerBounds(t *testing.T) {
	errs := check("version: 99999999999\nname: x\nstages: {a: {uses: gen}}\n")
	if len(errs) != 1 || errs[0].Where() != "p.yaml:1:10" || errs[0].Message != "version: integer 99999999999 out of range" {
		t.Fatalf("got %v", errs)
	}
	errs = check("version: 2\nname: x\nstages: {a: {uses: gen}}\n")
	if len(errs) != 1 || errs[0].Message != "version: unsupported spec version 2 (this mspipe reads version 1)" {
		t.Fatalf("got %v", errs)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(goodSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	p, errs, err := Load(good)
	if err != nil || len(errs) != 0 || p.Name != "demo" || p.BaseDir != dir {
		t.Fatalf("Load(good) = %v, %v, %v", p, errs, err)
	}

	// A file over the limit is a problem in the file, found without reading it.
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileSize + 10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, errs, err = Load(big)
	if err != nil || len(errs) != 1 || errs[0].Code != CodeTooLarge || errs[0].Where() != big {
		t.Fatalf("Load(big) = %v, %v", errs, err)
	}

	// Unreadable paths are errors, not problems.
	if _, _, err := Load(filepath.Join(dir, "none.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) error = %v, want fs.ErrNotExist", err)
	}
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Load(dir) error = %v", err)
	}
}

// TestMergeKeys: `<<: *anchor` and `<<: [*a, *b]` merge mappings, the
// mapping's own keys and earlier sources winning; a merge of something
// else is an error at its place.
func TestMergeKeys(t *testing.T) {
	src := `version: 1
name: merge
stages:
  a: &base {uses: use, needs: [z], with: &w {count: 1, label: base}}
  b:
    <<: *base
    with: {<<: [{label: first}, *w], count: 2}
  z: {uses: gen}
`
	p, errs := Parse("p.yaml", []byte(src))
	errs = append(errs, Validate(p, catalog, Options{})...)
	if len(errs) != 0 {
		t.Fatalf("problems:\n%s", lines(errs))
	}
	b := p.StageByID("b")
	if b == nil || b.Uses != "use" || len(b.Needs) != 1 || b.Needs[0] != "z" {
		t.Fatalf("stage b = %+v, want uses and needs from a", b)
	}
	r, err := NewResolver(p, catalog)
	if err != nil {
		t.Fatal(err)
	}
	with, err := r.With(b, &Scope{})
	if err != nil {
		t.Fatal(err)
	}
	if with["count"] != 2 || with["label"] != "first" || len(with) != 2 {
		t.Errorf("b's with = %v, want count 2 (its own), label first (the first source)", with)
	}

	bad := strings.Replace(src, "<<: *base", "<<: [1]", 1)
	p, errs = Parse("p.yaml", []byte(bad))
	if len(errs) == 0 || errs[0].Where() != "p.yaml:6:10" || !strings.Contains(errs[0].Message, "a merge key takes a mapping") {
		t.Errorf("merge of a number: %s", lines(errs))
	}
}
