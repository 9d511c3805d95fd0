package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// StageInputs is what Compose needs of a stage: its `uses` name and the
// JSON Schema of its `with` block, as the stage declares it.
type StageInputs struct {
	Name string
	With json.RawMessage
}

// Compose returns base with the `with` of each stage in stages typed by
// that stage's schema: an if/then on `uses` per stage, so that a
// validator reports a misspelt input or enum value of a built-in stage
// and still accepts any object for every other `uses` (custom plugins).
//
// A value in a spec may be a ${{ expression }} whose value is known only
// when the stage runs, so every input also accepts a templated string
// (the `templated` definition of base); descriptions and defaults stay on
// the input itself, where editors show them.
func Compose(base []byte, stages []StageInputs) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(base, &doc); err != nil {
		return nil, fmt.Errorf("parse the base schema: %w", err)
	}
	defs, _ := doc["$defs"].(map[string]any)
	stage, _ := defs["stage"].(map[string]any)
	if _, ok := defs["templated"]; !ok || stage == nil {
		return nil, fmt.Errorf("the base schema lacks $defs.stage or $defs.templated")
	}
	var rules []any
	for _, s := range stages {
		if len(s.With) == 0 {
			continue
		}
		var with map[string]any
		if err := json.Unmarshal(s.With, &with); err != nil {
			return nil, fmt.Errorf("stage %s: parse its with schema: %w", s.Name, err)
		}
		delete(with, "$schema") // a subschema takes the document's dialect
		// A definition name without "/" or "~", so that the $ref needs
		// no JSON Pointer escapes.
		def := "with." + strings.NewReplacer("/", ".", "~", ".").Replace(s.Name)
		if _, dup := defs[def]; dup {
			return nil, fmt.Errorf("stage %s listed twice", s.Name)
		}
		then := map[string]any{"properties": map[string]any{"with": map[string]any{"$ref": "#/$defs/" + def}}}
		if req, _ := with["required"].([]any); len(req) > 0 {
			then["required"] = []any{"with"}
		} else {
			// Without required inputs an empty `with:` (null) is fine.
			with = map[string]any{"anyOf": []any{with, map[string]any{"type": "null"}}}
		}
		with["description"] = "Inputs of " + s.Name + "."
		defs[def] = templatedInputs(with, true)
		rules = append(rules, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"uses": map[string]any{"const": s.Name}}, "required": []any{"uses"}},
			"then": then,
		})
	}
	if len(rules) > 0 {
		if _, ok := stage["allOf"]; ok {
			return nil, fmt.Errorf("the base schema's $defs.stage already has an allOf")
		}
		stage["allOf"] = rules
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("encode the schema: %w", err)
	}
	return buf.Bytes(), nil
}

// standardFormats are the formats JSON Schema 2020-12 defines.
var standardFormats = map[string]bool{
	"date-time": true, "date": true, "time": true, "duration": true, "email": true, "idn-email": true,
	"hostname": true, "idn-hostname": true, "ipv4": true, "ipv6": true, "uri": true, "uri-reference": true,
	"iri": true, "iri-reference": true, "uuid": true, "uri-template": true, "json-pointer": true,
	"relative-json-pointer": true, "regex": true,
}

// annotations are the keywords kept on an input when its value schema
// moves into an anyOf with the templated alternative.
var annotations = []string{"description", "default", "title", "examples", "deprecated"}

// templatedInputs rewrites a `with` schema so that every value below the
// top level (properties, items, map values, alternatives) also accepts a
// templated string. top is true for a schema that is not itself to be
// wrapped: the `with` object (an expression cannot replace it) and the
// alternatives of an anyOf or oneOf (wrapped once, around them all).
func templatedInputs(s map[string]any, top bool) map[string]any {
	if f, ok := s["format"].(string); ok && !standardFormats[f] {
		// mspipe's own formats (path) mean nothing to other validators,
		// and strict ones refuse a format they do not know.
		delete(s, "format")
	}
	for _, key := range []string{"properties", "patternProperties"} {
		if props, ok := s[key].(map[string]any); ok {
			for name, p := range props {
				if ps, ok := p.(map[string]any); ok {
					props[name] = templatedInputs(ps, false)
				}
			}
		}
	}
	for _, key := range []string{"items", "additionalProperties"} {
		if ps, ok := s[key].(map[string]any); ok {
			s[key] = templatedInputs(ps, false)
		}
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[key].([]any); ok {
			for i, a := range alts {
				if as, ok := a.(map[string]any); ok {
					// The alternatives themselves stay as they are: the
					// templated one is added once, around them.
					alts[i] = templatedInputs(as, true)
				}
			}
		}
	}
	if top || acceptsAnyString(s) {
		return s
	}
	out := map[string]any{}
	for _, k := range annotations {
		if v, ok := s[k]; ok {
			out[k] = v
			delete(s, k)
		}
	}
	out["anyOf"] = []any{s, map[string]any{"$ref": "#/$defs/templated"}}
	return out
}

// acceptsAnyString reports whether s is {"type": "string"} with nothing
// but annotations.
func acceptsAnyString(s map[string]any) bool {
	if s["type"] != "string" {
		return false
	}
	for k := range s {
		if k != "type" && !slices.Contains(annotations, k) {
			return false
		}
	}
	return true
}
