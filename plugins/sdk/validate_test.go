package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/mspipe/mspipe/plugins"
)

func mustCompile(t testing.TB, schema string) *schemaNode {
	t.Helper()
	doc, err := plugins.DecodeJSON([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	n, err := compileSchema(doc, "")
	if err != nil {
		t.Fatalf("compile %s: %v", schema, err)
	}
	return n
}

func TestCheckKeywords(t *testing.T) {
	tests := []struct {
		schema, value string
		want          []string // "path: message" of each problem; none means valid
	}{
		{`true`, `{"a":1}`, nil},
		{`false`, `1`, []string{"not allowed here"}},
		{`{"type":["string","null"]}`, `null`, nil},
		{`{"type":["string","null"]}`, `3`, []string{"want string or null, got integer"}},
		{`{"type":"integer"}`, `3.0`, nil},
		{`{"const":{"a":[1,2]}}`, `{"a":[1.0,2]}`, nil},
		{`{"const":3}`, `4`, []string{"want 3, got 4"}},
		{`{"enum":[1,"x",null]}`, `1.0`, nil},
		{`{"enum":[1,"x",null]}`, `false`, []string{`false is not one of 1, "x", null`}},
		{`{"multipleOf":0.1}`, `0.3`, nil},
		{`{"multipleOf":3}`, `10`, []string{"want a multiple of 3, got 10"}},
		{`{"maximum":1.5,"exclusiveMaximum":1}`, `1`, []string{"want less than 1, got 1"}},
		{`{"maxLength":2}`, `"µµ"`, nil},
		{`{"maxLength":2}`, `"abc"`, []string{"want at most 2 characters, got 3"}},
		{`{"minItems":1,"maxItems":1}`, `[]`, []string{"want at least 1 item, got 0"}},
		{`{"uniqueItems":true}`, `[1,"a",1.0]`, []string{"items 0 and 2 are equal; want unique items"}},
		{`{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}}`, `["a",1,2]`, nil},
		{`{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}}`, `[1,"b"]`,
			[]string{"/0: want string, got integer", "/1: want integer, got string"}},
		{`{"properties":{"a":{}},"patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false}`, `{"a":1,"x-b":"c"}`, nil},
		{`{"properties":{"a":{}},"patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false}`, `{"x-b":1,"b":2}`,
			[]string{`unknown property "b"`, "/x-b: want string, got integer"}},
		{`{"additionalProperties":{"type":"boolean"}}`, `{"a/b":1}`, []string{"/a~1b: want boolean, got integer"}},
		{`{"minProperties":1}`, `{}`, []string{"want at least 1 property, got 0"}},
		{`{"maxProperties":1}`, `{"a":1,"b":2}`, []string{"want at most 1 property, got 2"}},
		{`{"dependentRequired":{"a":["b"]}}`, `{"a":1}`, []string{`property "a" requires property "b"`}},
		{`{"allOf":[{"minimum":1},{"maximum":2}]}`, `3`, []string{"want at most 2, got 3"}},
		{`{"oneOf":[{"type":"integer"},{"minimum":0}]}`, `-1`, nil},
		{`{"oneOf":[{"type":"integer"},{"minimum":0}]}`, `1`, []string{"matches more than one alternative of oneOf (0 and 1)"}},
		{`{"anyOf":[{"type":"string","minLength":2},{"type":"array"}]}`, `"a"`, []string{"want at least 2 characters, got 1"}},
		{`{"anyOf":[{"type":"string"},{"type":"array"}]}`, `{}`, []string{"want string or array, got object"}},
		{`{"not":{"type":"null"}}`, `null`, []string{`not allowed here: it matches the schema under "not"`}},
		{`{"$ref":"#/$defs/x","format":"date-time","if":false}`, `"anything"`, nil}, // left to mspipe
	}
	for _, tt := range tests {
		value, err := plugins.DecodeJSON([]byte(tt.value))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range mustCompile(t, tt.schema).check(value, "") {
			got = append(got, p.String())
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s against %s: problems %q, want %q", tt.value, tt.schema, got, tt.want)
		}
	}
}

func TestCompileSchemaErrors(t *testing.T) {
	tests := []struct{ schema, want string }{
		{`{"type":"int"}`, "schema/type: want a JSON type name"},
		{`{"properties":{"a":{"pattern":"("}}}`, "schema /properties/a/pattern: error parsing regexp"},
		{`{"items":3}`, "schema /items: want a schema"},
		{`{"minLength":-1}`, "schema/minLength: want a non-negative integer"},
		{`{"multipleOf":0}`, "schema/multipleOf: want a number above 0"},
		{`{"anyOf":{}}`, "schema/anyOf: want an array of schemas"},
		{`{"required":[1]}`, "schema/required: want an array of strings"},
	}
	for _, tt := range tests {
		doc, err := plugins.DecodeJSON([]byte(tt.schema))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := compileSchema(doc, ""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.schema, err, tt.want)
		}
	}
}

// A broken pattern in a tag is the plugin author's error, not a problem of
// the block.
func TestStageBadPatternIsAnError(t *testing.T) {
	type badPattern struct {
		S string `json:"s" jsonschema:"pattern=("`
	}
	_, err := Stage[badPattern]{Name: "x"}.Validate(t.Context(), map[string]any{"s": "a"})
	if err == nil || !strings.Contains(err.Error(), `stage "x": schema /properties/s/pattern`) {
		t.Errorf("err = %v", err)
	}
}

// FuzzCheckAgreesWithJSONSchema compares the SDK's checker with a complete
// JSON Schema implementation on the schemas the SDK derives: both must
// accept or reject the same blocks.
func FuzzCheckAgreesWithJSONSchema(f *testing.F) {
	for _, seed := range []string{
		`{"data":"d"}`, `{"data":""}`, `{"data":"d","epochs":0}`, `{"data":"d","epochs":2.0}`, `{"data":"d","lr":0}`,
		`{"data":"d","mode":"auto"}`, `{"data":"d","layers":["a","B"]}`, `{"data":"d","options":{"seed":1,"x":2}}`,
		`{"data":"d","timeout":"1h5m"}`, `{"data":"d","timeout":"5"}`, `{"data":"d","timeout":-1}`, `{"data":"d","timeout":[]}`,
		`{"name":"ab","devices":4,"inner":{"rate":1}}`, `{"name":"ab","devices":3,"inner":{"rate":0}}`,
		`{"name":"","devices":16,"inner":{},"shards":[]}`, `{"name":"a","devices":1,"inner":{"rate":0.5},"pair":["a","b","c"]}`,
		`{"name":"a","devices":1,"inner":{"rate":0.5},"labels":{"k":1},"shards":[65,-1],"seed":1.5}`,
		`{"name":"a","devices":1,"inner":{"rate":0.5},"at":"yesterday","blob":"%%","anything":null,"extra":[1]}`,
	} {
		f.Add([]byte(seed))
	}
	type pair struct {
		ours *schemaNode
		ref  *jsonschema.Schema
	}
	var schemas []pair
	for _, typ := range []reflect.Type{reflect.TypeFor[trainWith](), reflect.TypeFor[schemaWith]()} {
		m, err := schemaMap(typ)
		if err != nil {
			f.Fatal(err)
		}
		ours, err := compileWithSchema(m)
		if err != nil {
			f.Fatal(err)
		}
		raw, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			f.Fatal(err)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("mem:///with.json", doc); err != nil {
			f.Fatal(err)
		}
		ref, err := c.Compile("mem:///with.json")
		if err != nil {
			f.Fatal(err)
		}
		schemas = append(schemas, pair{ours, ref})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		value, err := plugins.DecodeJSON(data)
		if err != nil {
			return
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i, s := range schemas {
			problems := s.ours.check(value, "")
			refErr := s.ref.Validate(inst)
			var verr *jsonschema.ValidationError
			if refErr != nil && !errors.As(refErr, &verr) {
				t.Fatalf("reference: %v", refErr)
			}
			if (len(problems) == 0) != (refErr == nil) {
				t.Fatalf("schema %d, %s: the SDK says %v, the reference %v", i, data, problems, refErr)
			}
		}
	})
}
