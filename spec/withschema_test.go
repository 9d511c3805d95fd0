package spec

import (
	"strings"
	"testing"
)

// TestCheckWith checks resolved values that validation could only check by
// their type: the problems name the place in the spec, as Validate does.
func TestCheckWith(t *testing.T) {
	cat := testCatalog{
		"gen": {Name: "gen", Outputs: []OutputDecl{{Name: "s", Type: TypeString}, {Name: "m", Type: TypeMap}, {Name: "x", Type: TypeAny}}},
		"pick": {Name: "pick", WithSchema: []byte(`{"type":"object","properties":{
			"cmd":{"oneOf":[{"type":"string","minLength":1},{"type":"array","minItems":1}]},
			"opts":{"type":"object","properties":{"k":{"type":"integer"}},"additionalProperties":false},
			"list":{"type":"array","items":{"type":"integer","maximum":9}}},
			"additionalProperties":false}`)},
	}
	src := `version: 1
name: late
stages:
  a: {uses: gen}
  b:
    uses: pick
    needs: a
    with:
      cmd: "${{ stages.a.outputs.s }}"
      opts: "${{ stages.a.outputs.m }}"
      list: [1, "${{ stages.a.outputs.x }}"]
`
	p, errs := Parse("p.yaml", []byte(src))
	if errs = append(errs, Validate(p, cat, Options{})...); errs.Err() != nil {
		t.Fatal(errs)
	}
	r, err := NewResolver(p, cat)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := CompileWithSchema(cat["pick"])
	if err != nil {
		t.Fatal(err)
	}
	b := p.StageByID("b")
	tests := []struct {
		name    string
		outputs map[string]any
		want    string // "" when the values fit
	}{
		{"fits", map[string]any{"s": "ls", "m": map[string]any{"k": 1}, "x": 3}, ""},
		{"empty string", map[string]any{"s": "", "m": map[string]any{}, "x": 3},
			"p.yaml:9:12: stages.b.with.cmd: minLength: got 0, want 1"},
		{"map with an unknown key", map[string]any{"s": "ls", "m": map[string]any{"k": 1, "j": 2}, "x": 3},
			`p.yaml:10:13: stages.b.with.opts: unknown input "j" for pick`},
		{"any output, two places", map[string]any{"s": "ls", "m": map[string]any{"k": "1"}, "x": 10},
			"p.yaml:10:13: stages.b.with.opts.k: got string, want integer; p.yaml:11:17: stages.b.with.list[1]: maximum: got 10, want 9"},
	}
	for _, tt := range tests {
		sc := &Scope{Stages: map[string]StageValue{"a": {Status: "succeeded", Outputs: tt.outputs}}}
		with, err := r.With(b, sc)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		err = r.CheckWith(b, ws, with)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("%s: err = %v\nwant %s", tt.name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: the error spans lines: %q", tt.name, err)
		}
	}
	if err := r.CheckWith(b, nil, map[string]any{"anything": true}); err != nil {
		t.Errorf("no schema: %v", err)
	}
	if ws, err := CompileWithSchema(cat["gen"]); ws != nil || err != nil {
		t.Errorf("CompileWithSchema without a schema = %v, %v; want nil, nil", ws, err)
	}
}
