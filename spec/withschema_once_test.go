package spec

import (
	"strings"
	"testing"
)

// A `with` schema is compiled once per process, whoever asks (validation,
// then the run, each with StageInfo values of their own), and again only
// for another document.
func TestCompileWithSchemaOncePerProcess(t *testing.T) {
	doc := `{"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false}`
	before := withSchemaCompiles.Load()
	first, err := CompileWithSchema(&StageInfo{Name: "test/once", WithSchema: []byte(doc)})
	if err != nil {
		t.Fatal(err)
	}
	second, err := CompileWithSchema(&StageInfo{Name: "test/once", WithSchema: []byte(doc)})
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Error("the same schema twice gave two compiled values")
	}
	if n := withSchemaCompiles.Load() - before; n != 1 {
		t.Errorf("the same schema twice: %d compiles, want 1", n)
	}
	if err := first.schema.Validate(map[string]any{"n": "x"}); err == nil {
		t.Error("the compiled schema accepts a string for an integer")
	}

	other, err := CompileWithSchema(&StageInfo{Name: "test/once", WithSchema: []byte(strings.Replace(doc, "integer", "string", 1))})
	if err != nil {
		t.Fatal(err)
	}
	if other == first || withSchemaCompiles.Load()-before != 2 {
		t.Errorf("another document: same value %v, %d compiles; want a new compile", other == first, withSchemaCompiles.Load()-before)
	}
	if err := other.schema.Validate(map[string]any{"n": "x"}); err != nil {
		t.Errorf("the second document's schema refuses a string: %v", err)
	}

	bad := &StageInfo{Name: "test/bad", WithSchema: []byte(`{"type": 3}`)}
	for range 2 {
		if _, err := CompileWithSchema(bad); err == nil {
			t.Error("an invalid schema compiled")
		}
	}
	if n := withSchemaCompiles.Load() - before; n != 3 {
		t.Errorf("an invalid schema twice: %d compiles in all, want 3 (its error is kept)", n)
	}
}
