package sdk

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/mspipe/mspipe/plugins"
)

// schemaURL names the derived schema inside the compiler; nothing is loaded
// from it.
const schemaURL = "mem:///with.schema.json"

// validateJSON checks a JSON document against a schema and returns one
// problem per failed keyword, pointing into the document. The error is for
// a schema that does not compile.
func validateJSON(schema map[string]any, data []byte) ([]plugins.Problem, error) {
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("read schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("load schema: %w", err)
	}
	compiled, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return []plugins.Problem{{Message: err.Error()}}, nil
	}
	err = compiled.Validate(inst)
	if err == nil {
		return nil, nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return nil, err
	}
	var problems []plugins.Problem
	units := verr.BasicOutput().Errors
	for _, unit := range units {
		if unit.Error == nil || hasCauses(unit, units) {
			continue
		}
		p := plugins.Problem{Path: unit.InstanceLocation, Message: unit.Error.String()}
		if !slices.Contains(problems, p) {
			problems = append(problems, p)
		}
	}
	if len(problems) == 0 {
		problems = append(problems, plugins.Problem{Message: verr.Error()})
	}
	// The validator's order follows map iteration; make it stable.
	slices.SortFunc(problems, func(a, b plugins.Problem) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Message, b.Message))
	})
	return problems, nil
}

// hasCauses reports whether other units explain why unit failed, as for
// "'anyOf' failed": the causes say more than the summary.
func hasCauses(unit jsonschema.OutputUnit, units []jsonschema.OutputUnit) bool {
	for _, u := range units {
		if u.Error != nil && strings.HasPrefix(u.KeywordLocation, unit.KeywordLocation+"/") {
			return true
		}
	}
	return false
}

// applyDefaults returns v with the schema's defaults filled in where a
// property is absent, recursively through nested objects. v is not modified.
func applyDefaults(schema map[string]any, v any) any {
	obj, isObj := v.(map[string]any)
	props, hasProps := schema["properties"].(map[string]any)
	if !isObj && v == nil && hasProps {
		obj, isObj = map[string]any{}, true
	}
	if !isObj || !hasProps {
		return v
	}
	out := make(map[string]any, len(obj))
	for k, x := range obj {
		out[k] = x
	}
	for name, ps := range props {
		sub, ok := ps.(map[string]any)
		if !ok {
			continue
		}
		if x, present := out[name]; present {
			if _, nested := x.(map[string]any); nested {
				out[name] = applyDefaults(sub, x)
			}
			continue
		}
		if d, ok := sub["default"]; ok {
			out[name] = d
		}
	}
	return out
}
