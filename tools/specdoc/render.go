package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/plugins"
)

// schema is one JSON Schema object, its keywords kept raw so that values
// (defaults, enums) print as written, and the properties in their order.
type schema struct {
	kw    map[string]json.RawMessage
	order []string // the keys of "properties", in the order written
}

func parseSchema(raw json.RawMessage) (schema, error) {
	var s schema
	if err := json.Unmarshal(raw, &s.kw); err != nil {
		return s, fmt.Errorf("parse schema: %w", err)
	}
	if props, ok := s.kw["properties"]; ok {
		keys, err := objectKeys(props)
		if err != nil {
			return s, fmt.Errorf("parse properties: %w", err)
		}
		s.order = keys
	}
	return s, nil
}

// objectKeys returns the keys of a JSON object in the order written:
// the pipeline schema lists keys in the order a spec usually has them.
func objectKeys(raw json.RawMessage) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

func (s schema) str(key string) string {
	var v string
	_ = json.Unmarshal(s.kw[key], &v)
	return v
}

func (s schema) sub(key string) (schema, bool) {
	raw, ok := s.kw[key]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("true")) {
		return schema{}, false
	}
	sub, err := parseSchema(raw)
	return sub, err == nil
}

func (s schema) list(key string) []schema {
	var raws []json.RawMessage
	_ = json.Unmarshal(s.kw[key], &raws)
	var out []schema
	for _, r := range raws {
		if sub, err := parseSchema(r); err == nil {
			out = append(out, sub)
		}
	}
	return out
}

func (s schema) required() map[string]bool {
	var names []string
	_ = json.Unmarshal(s.kw["required"], &names)
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// value prints a JSON value compactly, as a spec would write it.
func value(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// refName returns the definition a "$ref": "#/$defs/NAME" points at.
func refName(ref string) string {
	return strings.TrimPrefix(ref, "#/$defs/")
}

// typeOf describes what a schema accepts, in words with code spans:
// `int`, "one of `a`, `b`", "list of `string`", a link to a definition.
func typeOf(s schema) string {
	var alts []string
	if ref := s.str("$ref"); ref != "" {
		alts = append(alts, fmt.Sprintf("[%s](#def-%s)", refName(ref), refName(ref)))
	}
	if c, ok := s.kw["const"]; ok {
		alts = append(alts, "`"+value(c)+"`")
	}
	if e, ok := s.kw["enum"]; ok {
		var vals []json.RawMessage
		_ = json.Unmarshal(e, &vals)
		var parts []string
		for _, v := range vals {
			parts = append(parts, "`"+value(v)+"`")
		}
		alts = append(alts, "one of "+strings.Join(parts, ", "))
	}
	_, hasEnum := s.kw["enum"]
	_, hasConst := s.kw["const"]
	if t, ok := s.kw["type"]; ok && !hasEnum && !hasConst { // the values say the type
		var one string
		var many []string
		if json.Unmarshal(t, &one) == nil {
			many = []string{one}
		} else {
			_ = json.Unmarshal(t, &many)
		}
		for _, name := range many {
			alts = append(alts, typeName(s, name))
		}
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		for _, sub := range s.list(key) {
			alts = append(alts, typeOf(sub))
		}
	}
	if len(alts) == 0 {
		return "any"
	}
	return strings.Join(alts, " or ")
}

// typeName names one JSON type with what its items or values must be.
func typeName(s schema, t string) string {
	name := map[string]string{"integer": "int", "number": "number", "boolean": "bool", "string": "string", "object": "object", "array": "list", "null": "null"}[t]
	if name == "" {
		name = t
	}
	if t == "string" && s.str("format") == "path" {
		name = "path" // see the Paths section
	}
	desc := "`" + name + "`"
	if c := constraints(s, t); c != "" {
		desc += " (" + c + ")"
	}
	switch t {
	case "array":
		if items, ok := s.sub("items"); ok {
			desc = "list of " + typeOf(items)
			if c := constraints(s, t); c != "" {
				desc += " (" + c + ")"
			}
		}
	case "object":
		if len(s.order) > 0 {
			desc += " with keys `" + strings.Join(s.order, "`, `") + "`"
		}
		if vals, ok := s.sub("additionalProperties"); ok && len(s.order) == 0 {
			desc = "map of " + typeOf(vals)
			if c := constraints(s, t); c != "" {
				desc += " (" + c + ")"
			}
		}
	}
	return desc
}

// constraints lists the bounds a schema sets on a value of JSON type t.
func constraints(s schema, t string) string {
	var keys []struct{ kw, label string }
	switch t {
	case "integer", "number":
		keys = []struct{ kw, label string }{{"minimum", "≥ "}, {"exclusiveMinimum", "> "}, {"maximum", "≤ "}, {"exclusiveMaximum", "< "}, {"multipleOf", "multiple of "}}
	case "string":
		keys = []struct{ kw, label string }{{"minLength", "min length "}, {"maxLength", "max length "}, {"pattern", "pattern "}}
	case "array":
		keys = []struct{ kw, label string }{{"minItems", "min items "}, {"maxItems", "max items "}}
	case "object":
		keys = []struct{ kw, label string }{{"minProperties", "min keys "}}
	}
	var parts []string
	for _, k := range keys {
		raw, ok := s.kw[k.kw]
		if !ok {
			continue
		}
		v := value(raw)
		if k.kw == "pattern" {
			var p string
			_ = json.Unmarshal(raw, &p)
			v = "`" + p + "`"
		}
		parts = append(parts, k.label+v)
	}
	if t == "array" && value(s.kw["uniqueItems"]) == "true" {
		parts = append(parts, "no repeats")
	}
	return strings.Join(parts, ", ")
}

// prose escapes what markdown would take for HTML in a description, the
// "<" of "stages.<id>", outside code spans.
func prose(text string) string {
	parts := strings.Split(text, "`")
	for i := 0; i < len(parts); i += 2 { // even parts are outside code spans
		parts[i] = strings.ReplaceAll(parts[i], "<", `\<`)
	}
	return strings.Join(parts, "`")
}

// cell makes text safe inside a markdown table cell.
func cell(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	return strings.ReplaceAll(text, "|", `\|`)
}

// propertyTable writes a table of an object schema's properties.
func propertyTable(b *bytes.Buffer, s schema) error {
	req := s.required()
	b.WriteString("| key | type | required | default | description |\n|---|---|---|---|---|\n")
	for _, name := range s.order {
		prop, ok := s.sub("properties")
		if !ok {
			return fmt.Errorf("properties of %q", name)
		}
		p, err := parseSchema(prop.kw[name])
		if err != nil {
			return fmt.Errorf("property %s: %w", name, err)
		}
		def := ""
		if d, ok := p.kw["default"]; ok {
			def = "`" + value(d) + "`"
		}
		yes := ""
		if req[name] {
			yes = "yes"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", name, cell(typeOf(p)), yes, cell(def), cell(prose(p.str("description"))))
	}
	return nil
}

// Render writes the reference: the pipeline schema's keys, its
// definitions, then each stage's `with` inputs and outputs, stages by name.
func Render(pipelineSchema []byte, stages []plugins.Descriptor) ([]byte, error) {
	root, err := parseSchema(pipelineSchema)
	if err != nil {
		return nil, fmt.Errorf("pipeline schema: %w", err)
	}
	var b bytes.Buffer
	b.WriteString("# Spec reference\n\n")
	b.WriteString("<!-- Generated by `go run ./tools/specdoc` from schemas/pipeline.schema.json and the built-in stages' declarations. Do not edit. -->\n\n")
	b.WriteString("Every key a pipeline spec may have, from [the JSON Schema](../schemas/pipeline.schema.json) (`mspipe schema`),\n")
	b.WriteString("then the `with` inputs and the outputs of each built-in stage, as the stage declares them (`mspipe plugins`).\n")
	b.WriteString("The schema checks structure only; `mspipe validate` also checks expressions, needs, each stage's `with`\n")
	b.WriteString("against the stage's own schema, and rank tables.\n\n")
	if d := root.str("description"); d != "" {
		b.WriteString(prose(d) + "\n\n")
	}

	b.WriteString(pathsSection)
	b.WriteString("## Top-level keys\n\n")
	if err := propertyTable(&b, root); err != nil {
		return nil, err
	}

	defsRaw, ok := root.kw["$defs"]
	if ok {
		names, err := objectKeys(defsRaw)
		if err != nil {
			return nil, fmt.Errorf("$defs: %w", err)
		}
		var defs map[string]json.RawMessage
		if err := json.Unmarshal(defsRaw, &defs); err != nil {
			return nil, fmt.Errorf("$defs: %w", err)
		}
		b.WriteString("\n## Definitions\n\n")
		b.WriteString("The types the tables above and below link to.\n")
		for _, name := range names {
			d, err := parseSchema(defs[name])
			if err != nil {
				return nil, fmt.Errorf("$defs.%s: %w", name, err)
			}
			fmt.Fprintf(&b, "\n### <a id=\"def-%s\"></a>%s\n\n", name, name)
			if desc := d.str("description"); desc != "" {
				b.WriteString(prose(desc) + "\n\n")
			}
			if len(d.order) > 0 {
				if err := propertyTable(&b, d); err != nil {
					return nil, fmt.Errorf("$defs.%s: %w", name, err)
				}
				continue
			}
			fmt.Fprintf(&b, "Type: %s.\n", typeOf(d))
		}
	}

	sorted := append([]plugins.Descriptor(nil), stages...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	b.WriteString("\n## Built-in stages\n\n")
	b.WriteString("`uses:` one of these names. Inputs marked required must be in `with`; any input may be a `${{ }}` expression of the right type.\n")
	for _, d := range sorted {
		fmt.Fprintf(&b, "\n### `%s`\n\n", d.Name)
		fmt.Fprintf(&b, "%s (version %s).\n\n", prose(strings.TrimSuffix(d.Description, ".")), d.Version)
		b.WriteString("Inputs (`with`):\n\n")
		with, err := parseSchema(d.WithSchema)
		if err != nil {
			return nil, fmt.Errorf("stage %s: with schema: %w", d.Name, err)
		}
		if len(with.order) == 0 {
			b.WriteString("none.\n")
		} else if err := propertyTable(&b, with); err != nil {
			return nil, fmt.Errorf("stage %s: %w", d.Name, err)
		}
		b.WriteString("\nOutputs (`stages.<id>.outputs.<name>`):\n\n")
		if len(d.Outputs) == 0 {
			b.WriteString("none.\n")
			continue
		}
		b.WriteString("| name | type | description |\n|---|---|---|\n")
		for _, o := range d.Outputs {
			name := "`" + o.Name + "`"
			if o.Name == plugins.WildcardOutput {
				name = "any other name"
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s |\n", name, o.Type, cell(prose(o.Description)))
		}
	}
	return b.Bytes(), nil
}

// pathsSection states the one rule for relative paths (the engine's
// spec.AbsPaths, spec.AbsParams and output handling implement it).
const pathsSection = `## Paths

One rule for a relative path, wherever it is written:

- **A path written in the spec** (a ` + "`with`" + ` input of type ` + "`path`" + ` below, a param of type ` + "`path`" + `
  with its default, ` + "`cluster.rank_table`" + `) resolves against the directory of the spec file, whatever
  directory mspipe runs in. A ` + "`-p name=value`" + ` of a ` + "`path`" + ` param is a command-line argument: it resolves
  against the directory mspipe runs in.
- **A path a stage reports** (an output of type ` + "`path`" + `, such as an ` + "`exec`" + ` stage's ` + "`out=result.txt`" + `)
  resolves against that stage's work directory (` + "`runs/<run>/stages/<id>/`" + `; for ` + "`exec`" + `, not its ` + "`dir`" + `).

Both are made absolute before a plugin, a rank or the cache sees them; ` + "`run.json`" + ` records the absolute
paths. The content of every ` + "`path`" + ` input and param is part of the stage's cache key, so a changed file
under an unchanged name runs the stage again. An input that takes either a keyword or a path (` + "`cifar/prepare`" + `'s
` + "`source`" + `) requires an absolute path; ` + "`mspipe validate`" + ` refuses a relative one.

`
