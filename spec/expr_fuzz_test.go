package spec

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzExpression puts arbitrary text into a template (`with.label`) and an
// arbitrary expression into `if:` of a stage that sees every kind of value
// (exprHead), then parses, type-checks and, when the spec is valid,
// evaluates both. Nothing may panic, every problem names the file and a line
// inside it, and evaluation failures are errors with a message.
func FuzzExpression(f *testing.F) {
	for _, s := range [][2]string{
		{"${{ params.s }}-${{ cluster.devices }}", "params.i > 0"},
		{"${{ params.l[0] }} ${{ params.m.a }}", "stages.a.outputs.loss < 2.5 && params.b"},
		{"${{ params.p + '/data' }}", "env.HOME == '/h'"},
		{"${{ stages.a.outputs.n * params.i }}", "stages.a.status == 'succeeded'"},
		{"${{ run.id }}/${{ run.name }}", "len(params.l) > 1 ? true : false"},
		{"${{ params.l[7] }}", "params.i / 0 > 1"},
		{"${{ ${{ }} }}", "}}"},
		{"${{ params.m['a'] ?? 'x' }}", "params.f ** 400 > 1"},
		{"${{ 'a' matches '[' }}", "'x' in params.l"},
		{"${{ repeat('ab', 1000) }}", "true"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, label, cond string) {
		src := exprHead + "  u: {uses: use, needs: a, if: " + yamlQuote("${{ "+cond+" }}") + ", with: {label: " + yamlQuote(label) + "}}\n"
		p, errs := Parse("p.yaml", []byte(src))
		if p == nil {
			t.Fatal("Parse returned a nil pipeline")
		}
		errs = append(errs, Validate(p, catalog, Options{})...)
		lines := bytes.Count([]byte(src), []byte("\n")) + 1
		for _, e := range errs {
			if e.File != "p.yaml" || e.Line < 0 || e.Line > lines || e.Message == "" {
				t.Fatalf("problem without file, line or message: %+v", e)
			}
		}
		if errs.Err() != nil {
			return
		}
		r, err := NewResolver(p, catalog)
		if err != nil {
			t.Fatalf("a valid spec has no resolver: %v", err)
		}
		sc := &Scope{
			Params:  map[string]any{"i": 1, "f": 0.5, "s": "x", "b": true, "l": []any{1}, "m": map[string]any{"a": 1}, "p": "/x"},
			Cluster: ClusterValue{Devices: 8, Hosts: 1},
			Stages: map[string]StageValue{
				"a": {Status: "succeeded", Outputs: map[string]any{"n": 4, "dir": "/d", "loss": 1.5}},
				"z": {Status: "succeeded", Outputs: map[string]any{"n": 2, "dir": "/e", "loss": 2.5}},
			},
			Env: map[string]string{"HOME": "/h"},
			Run: RunValue{ID: "r1", Name: "typing", Dir: "/runs/r1"},
		}
		u := p.StageByID("u")
		if _, err := r.If(u, sc); err != nil && err.Error() == "" {
			t.Fatal("if: an error without a message")
		}
		if _, err := r.With(u, sc); err != nil && err.Error() == "" {
			t.Fatal("with: an error without a message")
		}
	})
}

// yamlQuote writes s as a double-quoted YAML scalar (a JSON string is one).
func yamlQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
