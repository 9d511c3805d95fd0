package spec

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testCatalog declares a few stages with typed outputs and a with schema.
type testCatalog map[string]*StageInfo

func (c testCatalog) Names() []string {
	var out []string
	for n := range c {
		out = append(out, n)
	}
	return out
}

func (c testCatalog) Stage(uses string) (*StageInfo, error) {
	if info, ok := c[uses]; ok {
		return info, nil
	}
	return nil, errors.New("unknown stage")
}

var catalog = testCatalog{
	"gen": {Name: "gen", Outputs: []OutputDecl{{Name: "n", Type: TypeInt}, {Name: "dir", Type: TypePath}, {Name: "loss", Type: TypeFloat}}},
	"use": {Name: "use", WithSchema: []byte(`{"type":"object","properties":{"count":{"type":"integer","minimum":1},"label":{"type":"string"}},"additionalProperties":false}`)},
	// A duration, as the SDK describes one: a string with a pattern, or a
	// number of nanoseconds.
	"wait": {Name: "wait", WithSchema: []byte(`{"type":"object","properties":{"timeout":{"anyOf":[{"type":"string","pattern":"^[0-9]+(ms|s|m|h)$"},{"type":"number"}]}},"additionalProperties":false}`)},
}

const goodSpec = `version: 1
name: demo
params:
  epochs: {type: int, default: 3}
  tag: {type: string, default: run}
cluster: {devices: 8}
stages:
  a:
    uses: gen
  b:
    uses: use
    needs: a
    if: "${{ stages.a.outputs.loss < 2.5 && params.epochs > 1 }}"
    with:
      count: "${{ stages.a.outputs.n * params.epochs }}"
      label: "${{ params.tag }}-${{ cluster.devices }}dev"
`

func mustValid(t *testing.T, src string) *Pipeline {
	t.Helper()
	p, errs := Parse("p.yaml", []byte(src))
	errs = append(errs, Validate(p, catalog, Options{})...)
	if err := errs.Err(); err != nil {
		t.Fatalf("unexpected problems: %v", errs)
	}
	return p
}

func TestResolveTypedValues(t *testing.T) {
	p := mustValid(t, goodSpec)
	r, err := NewResolver(p, catalog)
	if err != nil {
		t.Fatal(err)
	}
	sc := &Scope{
		Params:  map[string]any{"epochs": 4, "tag": "x"},
		Cluster: ClusterValue{Devices: 8, Hosts: 1},
		Stages:  map[string]StageValue{"a": {Status: "succeeded", Outputs: map[string]any{"n": 5.0, "loss": 1.25, "dir": "/d"}}},
	}
	b := p.StageByID("b")
	with, err := r.With(b, sc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"count": 20, "label": "x-8dev"}
	if !reflect.DeepEqual(with, want) {
		t.Errorf("with = %#v, want %#v", with, want)
	}
	run, err := r.If(b, sc)
	if err != nil || !run {
		t.Errorf("if = %v, %v; want true", run, err)
	}
	sc.Stages["a"] = StageValue{Outputs: map[string]any{"n": 5, "loss": 3.0}}
	if run, _ := r.If(b, sc); run {
		t.Error("if = true with loss 3.0, want false")
	}
	sc.Stages["a"] = StageValue{Outputs: map[string]any{"n": "five"}}
	if _, err := r.With(b, sc); err == nil || !strings.Contains(err.Error(), "stages.a.outputs.n: expected an integer") {
		t.Errorf("bad output value: err = %v", err)
	}
}

func TestExpressionPositions(t *testing.T) {
	src := strings.Replace(goodSpec, "params.epochs }}\"\n      label", "params.epoch }}\"\n      label", 1)
	p, errs := Parse("p.yaml", []byte(src))
	errs = append(errs, Validate(p, catalog, Options{})...)
	if len(errs) != 1 {
		t.Fatalf("want 1 problem, got %v", errs)
	}
	// `      count: "${{ stages.a.outputs.n * params.epoch }}"` : "epoch" starts at column 47.
	if got := errs[0].Where(); got != "p.yaml:15:47" {
		t.Errorf("position %s, want p.yaml:15:47 (%v)", got, errs[0])
	}
}

func TestParseParam(t *testing.T) {
	tests := []struct {
		typ  Type
		raw  string
		want any
		err  string
	}{
		{TypeInt, "12", 12, ""},
		{TypeInt, "1.5", nil, "not an integer"},
		{TypeFloat, "0.25", 0.25, ""},
		{TypeBool, "true", true, ""},
		{TypeBool, "yes", nil, "not true or false"},
		{TypeString, "a=b", "a=b", ""},
		{TypeList, "[1, 2]", []any{1, 2}, ""},
		{TypeMap, "{a: 1}", map[string]any{"a": 1}, ""},
		{TypeMap, "[1]", nil, "expected a mapping"},
	}
	for _, tt := range tests {
		got, err := ParseParam(&Param{Name: "x", Type: tt.typ}, tt.raw)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s %q: err = %v, want %q", tt.typ, tt.raw, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s %q = %#v, %v; want %#v", tt.typ, tt.raw, got, err, tt.want)
		}
	}
}

func TestSecondDocumentAndSyntaxCode(t *testing.T) {
	_, errs := Parse("x.yaml", []byte("version: 1\nname: x\nstages: {a: {uses: gen}}\n---\nb: 1\n"))
	if len(errs) != 1 || errs[0].Where() != "x.yaml:4:1" || !strings.Contains(errs[0].Message, "found a second one") || !Decoded(errs) {
		t.Fatalf("errs = %v", errs)
	}
	_, errs = Parse("x.yaml", []byte("a: [\n"))
	if len(errs) != 1 || errs[0].Code != CodeSyntax || Decoded(errs) {
		t.Errorf("want one %s diagnostic, got %v (code %q)", CodeSyntax, errs, errs[0].Code)
	}
}

// FuzzParse feeds arbitrary bytes to the decoder and validator: they must
// never panic, and every problem must carry the file name.
func FuzzParse(f *testing.F) {
	f.Add([]byte(goodSpec))
	seeds, _ := filepath.Glob("testdata/invalid/*.yaml")
	examples, _ := filepath.Glob("../examples/*.yaml")
	for _, s := range append(seeds, examples...) {
		if data, err := os.ReadFile(s); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, errs := Parse("f.yaml", data)
		if p == nil {
			t.Fatal("Parse returned a nil pipeline")
		}
		errs = append(errs, Validate(p, catalog, Options{})...)
		for _, e := range errs {
			if e.File != "f.yaml" {
				t.Fatalf("problem without the file name: %v", e)
			}
		}
	})
}

// A templated value is checked by its type only: a string expression fits
// an anyOf whose string alternative has a pattern, and a boolean one fits
// no alternative and is reported once.
func TestTemplatedValueAgainstAlternatives(t *testing.T) {
	mustValid(t, `version: 1
name: d
params:
  t: {type: string, default: 10s}
  n: {type: int, default: 5}
stages:
  s: {uses: wait, with: {timeout: "${{ params.t }}"}}
  u: {uses: wait, with: {timeout: "${{ params.n }}"}}
`)
	p, errs := Parse("p.yaml", []byte(`version: 1
name: d
params:
  b: {type: bool, default: true}
stages:
  s: {uses: wait, with: {timeout: "${{ params.b }}"}}
`))
	errs = append(errs, Validate(p, catalog, Options{})...)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "stages.s.with.timeout: the value of ${{ params.b }} (true) does not fit: got boolean, want string") {
		t.Fatalf("problems %v, want one type problem for stages.s.with.timeout", errs)
	}
}
