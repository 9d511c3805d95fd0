package schemas

import (
	"encoding/json"
	"strings"
	"testing"
)

// An input keeps its description and default where editors look for them,
// and takes a templated string besides its own type; a plain string input
// needs no alternative.
func TestComposeWrapsInputs(t *testing.T) {
	with := `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "additionalProperties": false, "required": ["data"],
		"properties": {"data": {"type": "string", "description": "where"}, "epochs": {"type": "integer", "minimum": 1, "default": 1, "description": "how many"}}}`
	doc, err := Compose(Base, []StageInputs{{Name: "npu/train", With: json.RawMessage(with)}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Defs map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(doc, &got); err != nil {
		t.Fatal(err)
	}
	var def struct {
		Schema     string `json:"$schema"`
		Properties map[string]map[string]any
	}
	if err := json.Unmarshal(got.Defs["with.npu.train"], &def); err != nil {
		t.Fatalf("with.npu.train: %v", err)
	}
	if def.Schema != "" {
		t.Error("the stage's $schema is kept inside the document")
	}
	epochs := def.Properties["epochs"]
	if epochs["description"] != "how many" || epochs["default"] != 1.0 || epochs["anyOf"] == nil {
		t.Errorf("epochs: %v, want the description and default outside an anyOf", epochs)
	}
	if data := def.Properties["data"]; data["type"] != "string" || data["anyOf"] != nil {
		t.Errorf("data: %v, want the plain string schema", data)
	}
	if !strings.Contains(string(got.Defs["stage"]), `"$ref":"#/$defs/with.npu.train"`) && !strings.Contains(string(got.Defs["stage"]), `"$ref": "#/$defs/with.npu.train"`) {
		t.Errorf("the stage definition does not refer to with.npu.train:\n%s", got.Defs["stage"])
	}
}

func TestComposeRefusesBadInput(t *testing.T) {
	if _, err := Compose([]byte(`{"$defs": {}}`), nil); err == nil || !strings.Contains(err.Error(), "lacks $defs.stage") {
		t.Errorf("a base without $defs.stage: %v", err)
	}
	if _, err := Compose(Base, []StageInputs{{Name: "x", With: json.RawMessage(`{`)}}); err == nil || !strings.Contains(err.Error(), "stage x") {
		t.Errorf("a stage schema that is not JSON: %v", err)
	}
	two := []StageInputs{{Name: "x", With: json.RawMessage(`{}`)}, {Name: "x", With: json.RawMessage(`{}`)}}
	if _, err := Compose(Base, two); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("a stage listed twice: %v", err)
	}
}
