package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

// TestReferenceUpToDate fails when docs/spec-reference.md is not what the
// generator writes from this build's schema and built-in stages.
func TestReferenceUpToDate(t *testing.T) {
	want, err := generate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", filepath.FromSlash(DefaultOutput))
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the committed reference: %v; create it from the module root with: go run ./tools/specdoc", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		line := 0
		for line < len(gl) && line < len(wl) && gl[line] == wl[line] {
			line++
		}
		first := func(ls []string) string {
			if line < len(ls) {
				return ls[line]
			}
			return "(end of file)"
		}
		t.Errorf("%s is out of date with the schema or the built-in stages; regenerate it from the module root with:\n\tgo run ./tools/specdoc\nfirst difference at line %d:\n committed: %s\n generated: %s",
			DefaultOutput, line+1, first(gl), first(wl))
	}
}

func TestTypeOf(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type": "integer", "minimum": 1, "maximum": 100}`, "`int` (≥ 1, ≤ 100)"},
		{`{"type": "number", "exclusiveMinimum": 0}`, "`number` (> 0)"},
		{`{"enum": ["a", "b"], "type": "string"}`, "one of `\"a\"`, `\"b\"`"},
		{`{"const": 1}`, "`1`"},
		{`{"$ref": "#/$defs/duration"}`, "[duration](#def-duration)"},
		{`{"type": "array", "items": {"type": "string"}, "minItems": 1}`, "list of `string` (min items 1)"},
		{`{"type": "object", "additionalProperties": {"type": "string"}}`, "map of `string`"},
		{`{"type": "object", "properties": {"b": {}, "a": {}}}`, "`object` with keys `b`, `a`"},
		{`{"anyOf": [{"type": "string", "pattern": "^x|y$"}, {"type": "null"}]}`, "`string` (pattern `^x|y$`) or `null`"},
		{`{"type": ["string", "boolean"]}`, "`string` or `bool`"},
		{`{}`, "any"},
	} {
		s, err := parseSchema(json.RawMessage(tc.schema))
		if err != nil {
			t.Fatal(err)
		}
		if got := typeOf(s); got != tc.want {
			t.Errorf("typeOf(%s) = %q, want %q", tc.schema, got, tc.want)
		}
	}
}

// TestRender checks the parts of a reference from a small schema and stage:
// keys in the order written, required marks, defaults, escaped prose and
// table cells, and stages sorted by name.
func TestRender(t *testing.T) {
	pipeline := `{"description": "A spec.", "required": ["name"], "properties": {
		"name": {"type": "string", "description": "the <name>"},
		"alpha": {"$ref": "#/$defs/thing", "default": 3}},
		"$defs": {"thing": {"description": "A thing.", "type": "integer"}}}`
	stages := []plugins.Descriptor{
		{Name: "z/last", Version: "2.0.0", Description: "Last.", WithSchema: json.RawMessage(`{"type": "object"}`)},
		{Name: "a/first", Version: "1.0.0", Description: "First stage.",
			WithSchema: json.RawMessage(`{"type": "object", "required": ["x"], "properties": {"x": {"type": "string", "description": "a | b"}}}`),
			Outputs:    []plugins.OutputSpec{{Name: "n", Type: "int", Description: "count"}, {Name: plugins.WildcardOutput, Type: "any"}}},
	}
	out, err := Render([]byte(pipeline), stages, StageNotes{"a/first": "What it *does*."})
	if err != nil {
		t.Fatal(err)
	}
	doc := string(out)
	for _, want := range []string{
		"| `name` | `string` | yes |  | the \\<name> |\n| `alpha` | [thing](#def-thing) |  | `3` |  |\n",
		"### <a id=\"def-thing\"></a>thing\n\nA thing.\n\nType: `int`.\n",
		"### `a/first`\n\nFirst stage (version 1.0.0).\n\nWhat it *does*.\n\nInputs",
		"| `x` | `string` | yes |  | a \\| b |\n",
		"| `n` | `int` | count |\n| any other name | `any` |  |\n",
		"### `z/last`\n\nLast (version 2.0.0).\n\nInputs (`with`):\n\nnone.\n\nOutputs (`stages.<id>.outputs.<name>`):\n\nnone.\n",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("reference lacks %q:\n%s", want, doc)
		}
	}
	if strings.Index(doc, "a/first") > strings.Index(doc, "z/last") {
		t.Error("stages are not sorted by name")
	}
	if _, err := Render([]byte(`{"properties": [`), nil, nil); err == nil {
		t.Error("Render accepted a schema that is not JSON")
	}
	if _, err := Render([]byte(pipeline), stages, StageNotes{"a/gone": "x"}); err == nil || !strings.Contains(err.Error(), `"a/gone"`) {
		t.Errorf("Render with a note about an unknown stage: err = %v, want one naming it", err)
	}
}

// TestParseStageNotes checks the split into sections, and that a heading
// that is not a stage name and a stage written twice are errors.
func TestParseStageNotes(t *testing.T) {
	notes, err := parseStageNotes("<!-- editors -->\n\n## `a/x`\n\nOne.\n\n- two\n## `b`\nThree\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 2 || notes["a/x"] != "One.\n\n- two" || notes["b"] != "Three" {
		t.Errorf("notes = %q", notes)
	}
	for _, bad := range []string{"## a/x\ntext", "## `a`\none\n## `a`\ntwo"} {
		if _, err := parseStageNotes(bad); err == nil {
			t.Errorf("parseStageNotes(%q) accepted it", bad)
		}
	}
	if _, err := parseStageNotes(stageNotesFile); err != nil {
		t.Errorf("the committed stagenotes.md: %v", err)
	}
}
