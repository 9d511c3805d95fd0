package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mspipe/mspipe/internal/diag"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"gopkg.in/yaml.v3"
)

// withSchemas validates each stage's `with` against the JSON Schema its
// plugin declares. A `${{ }}` value is checked by its static type only: its
// value is unknown until the stage runs (Resolver.CheckWith checks it then).
func (v *validator) withSchemas() {
	compiled := map[string]*WithSchema{}
	for _, s := range v.p.Stages {
		info := v.infos[s.ID]
		if info == nil || info.WithSchema == nil {
			continue
		}
		ws, ok := compiled[info.Name]
		if !ok {
			var err error
			ws, err = CompileWithSchema(info)
			if err != nil {
				v.errs.add(s.UsesPos, "stages.%s.uses: stage %s declares an invalid schema for with: %v", s.ID, info.Name, err)
				compiled[info.Name] = nil
				v.schemaFailed[s.ID] = true
				continue
			}
			compiled[info.Name] = ws
		}
		if ws == nil {
			v.schemaFailed[s.ID] = true
			continue
		}
		inst, templated, static := v.withInstance(s)
		err := ws.schema.Validate(inst)
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			continue
		}
		before := len(v.errs)
		reported := map[string]bool{}
		for _, leaf := range schemaLeaves(ve) {
			note := ""
			ptr := "/" + strings.Join(leaf.InstanceLocation, "/")
			if sv, ok := static[ptr]; ok {
				// One problem per value: alternatives would each add one.
				if reported[ptr] {
					continue
				}
				reported[ptr] = true
				shown := truncate(formatValue(sv.val), 40)
				if _, isString := sv.val.(string); isString {
					shown = strconv.Quote(shown)
				}
				note = fmt.Sprintf("the value of %s (%s) does not fit: ", strings.TrimSpace(sv.t.Raw), shown)
			} else if known, ok := templated[ptr]; ok {
				// Only the static type of a templated value is known now:
				// report it once, and only if no alternative takes the type.
				if !known || kindOf(leaf) != "type" || reported[ptr] || !typeRefused(ve, ptr) {
					continue
				}
				reported[ptr] = true
				note = "the expression's type does not fit: "
			}
			for _, pr := range ws.leafProblems(v.p.File, s, leaf) {
				v.errs.add(pr.pos, "%s: %s%s", pr.place, note, pr.msg)
			}
		}
		if len(v.errs) > before {
			v.schemaFailed[s.ID] = true
		}
	}
}

// WithSchema is the compiled JSON Schema of a stage's `with` block.
type WithSchema struct {
	stage  string // the stage's name, for messages
	doc    []byte // the schema document, for suggestions
	schema *jsonschema.Schema
}

// CompileWithSchema compiles the schema of `with` a stage declares; it
// returns nil when the stage declares none, which accepts anything. A
// schema is compiled when a check first needs it, and once per process:
// validating a spec and running it both check every stage against its
// schema, from catalogs of their own, and get the same compiled value for
// the same stage name and schema document.
func CompileWithSchema(info *StageInfo) (*WithSchema, error) {
	if info == nil || info.WithSchema == nil {
		return nil, nil
	}
	key := info.Name + "\x00" + string(info.WithSchema)
	compile, _ := withSchemas.LoadOrStore(key, sync.OnceValues(func() (*WithSchema, error) {
		withSchemaCompiles.Add(1)
		doc := slices.Clone(info.WithSchema)
		sch, err := CompileSchema(info.Name, doc)
		if err != nil {
			return nil, err
		}
		return &WithSchema{stage: info.Name, doc: doc, schema: sch}, nil
	}))
	return compile.(func() (*WithSchema, error))()
}

// withSchemas memoizes CompileWithSchema for the process, by stage name and
// schema document: a compiled schema is immutable and safe for concurrent
// use, and a process checks a handful of stage kinds.
var withSchemas sync.Map // string -> func() (*WithSchema, error)

// withSchemaCompiles counts the compiles CompileWithSchema did (for tests).
var withSchemaCompiles atomic.Int64

// CheckWith checks the resolved `with` of stage s, the values its plugin
// will receive, against the stage's compiled schema (nil accepts anything).
// Validate knows a `${{ }}` value only by its static type; this sees the
// value, such as an empty string from another stage's output. The error
// lists every problem on one line, in the form Validate uses:
// `file:line:col: stages.<id>.with.<path>: message`, the position being the
// value's in the spec.
func (r *Resolver) CheckWith(s *Stage, ws *WithSchema, with map[string]any) error {
	if ws == nil {
		return nil
	}
	// Through JSON, as the plugin receives it: the validator knows JSON
	// types, not every Go type an expression can produce.
	data, err := json.Marshal(with)
	if err != nil {
		return fmt.Errorf("stages.%s.with: %w", s.ID, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("stages.%s.with: %w", s.ID, err)
	}
	err = ws.schema.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("stages.%s.with: check against the schema of %s: %w", s.ID, ws.stage, err)
	}
	var problems []withProblem
	for _, leaf := range schemaLeaves(ve) {
		problems = append(problems, ws.leafProblems(r.p.File, s, leaf)...)
	}
	sort.SliceStable(problems, func(i, j int) bool {
		a, b := problems[i].pos, problems[j].pos
		return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
	})
	var b strings.Builder
	for i, pr := range problems {
		if i > 0 {
			b.WriteString("; ")
			if prev := problems[i-1]; pr.pos == prev.pos && pr.place == prev.place {
				// Say the place once, as for the alternatives of a oneOf.
				b.WriteString(pr.msg)
				continue
			}
		}
		fmt.Fprintf(&b, "%s: %s: %s", pr.pos, pr.place, pr.msg)
	}
	return errors.New(b.String())
}

// withProblem is one problem in a stage's `with`: where it is in the spec
// file, its place in the spec's terms (stages.train.with.layers[1]) and
// what is wrong.
type withProblem struct {
	pos   Pos
	place string
	msg   string
}

// leafProblems describes one failed keyword of a `with` block: one problem
// per unknown input for additionalProperties, else one.
func (ws *WithSchema) leafProblems(file string, s *Stage, leaf *jsonschema.ValidationError) []withProblem {
	pos, place := withPlace(file, s, leaf.InstanceLocation)
	ap, ok := leaf.ErrorKind.(*kind.AdditionalProperties)
	if !ok {
		return []withProblem{{pos: pos, place: place, msg: schemaMessage(leaf)}}
	}
	// One problem per unknown input, at its key, in file order.
	props := append([]string(nil), ap.Properties...)
	sort.Slice(props, func(i, j int) bool {
		return keyLine(s.With, leaf.InstanceLocation, props[i]) < keyLine(s.With, leaf.InstanceLocation, props[j])
	})
	known := schemaProperties(ws.doc, leaf.InstanceLocation)
	out := make([]withProblem, 0, len(props))
	for _, prop := range props {
		kpos := pos
		if k := lookupKey(s.With, leaf.InstanceLocation, prop); k != nil {
			kpos = Pos{File: file, Line: k.Line, Col: k.Column}
		}
		out = append(out, withProblem{pos: kpos, place: place, msg: fmt.Sprintf("unknown input %q for %s%s", prop, ws.stage, diag.Suggest(prop, known))})
	}
	return out
}

// withPlace is where the value at loc (JSON pointer tokens) of a stage's
// `with` is in the spec file, and its place in the spec's terms
// (stages.train.with.layers[1]). The position is the value's node, or the
// nearest one above it for a place inside a value that came from an
// expression or that the spec does not have.
func withPlace(file string, s *Stage, loc []string) (Pos, string) {
	pos := s.keyPos["with"]
	if pos.Line == 0 {
		pos = s.Pos
	}
	for i := len(loc); i >= 0; i-- {
		if n := lookupNode(s.With, loc[:i]); n != nil {
			pos = Pos{File: file, Line: n.Line, Col: n.Column}
			break
		}
	}
	place := "stages." + s.ID + ".with"
	for _, tok := range loc {
		if _, err := strconv.Atoi(tok); err == nil {
			place += "[" + tok + "]"
		} else {
			place += "." + tok
		}
	}
	return pos, place
}

// CompileSchema compiles a JSON Schema document (2020-12 unless it says
// otherwise) held in memory.
func CompileSchema(name string, doc []byte) (*jsonschema.Schema, error) {
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "mspipe:///" + strings.ReplaceAll(name, "/", "_") + ".schema.json"
	if err := c.AddResource(url, parsed); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// withInstance converts a stage's with to JSON data. Templates become a
// sample of their static type; templated maps the JSON pointer of each to
// whether that type is known.
func (v *validator) withInstance(s *Stage) (any, map[string]bool, map[string]staticValue) {
	templated := map[string]bool{}
	static := map[string]staticValue{}
	byNode := map[*yaml.Node]*Template{}
	for _, t := range s.Templates {
		byNode[t.Node()] = t
	}
	sc := v.staticScope(s)
	var conv func(n *yaml.Node, ptr string, depth int) any
	conv = func(n *yaml.Node, ptr string, depth int) any {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil || depth > maxDepth {
			return nil
		}
		switch n.Kind {
		case yaml.MappingNode:
			m := make(map[string]any, len(n.Content)/2)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				m[k] = conv(n.Content[i+1], ptr+"/"+jsonPointerEscape(k), depth+1)
			}
			return m
		case yaml.SequenceNode:
			l := make([]any, len(n.Content))
			for i, c := range n.Content {
				l[i] = conv(c, ptr+"/"+strconv.Itoa(i), depth+1)
			}
			return l
		}
		if t, ok := byNode[n]; ok {
			// A value of params (defaults or -p) and the cluster is known
			// now: check it whole, as the run will, before anything runs.
			if val, ok := v.staticEval(t, sc); ok {
				if inst, ok := jsonInstance(val); ok {
					static[ptr] = staticValue{t: t, val: val}
					return inst
				}
			}
			sample, known := sampleOf(t)
			templated[ptr] = known
			return sample
		}
		if s.badTemplates[n] {
			templated[ptr] = false
			return nil
		}
		val, err := scalarValue(n)
		if err != nil {
			return n.Value
		}
		return val
	}
	if s.With == nil {
		return map[string]any{}, templated, static
	}
	return conv(s.With, "", 0), templated, static
}

// staticValue is a template's value known before the run.
type staticValue struct {
	t   *Template
	val any
}

// jsonInstance converts an expression's value to what the schema
// validator takes, through JSON as the plugin will receive it.
func jsonInstance(val any) (any, bool) {
	data, err := json.Marshal(val)
	if err != nil {
		return nil, false
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	return inst, err == nil
}

// sampleOf is a stand-in value of a template's static type, and whether
// that type is known (an `any` output can hold anything at run time).
//
// A string sample is never empty, so that it passes minLength and lets an
// anyOf/oneOf pick the string branch; constraints other than the type are
// not checked for templated values.
func sampleOf(t *Template) (any, bool) {
	if !t.Whole() {
		var b strings.Builder
		for _, p := range t.Parts {
			if p.Expr != "" {
				b.WriteString("0")
			} else {
				b.WriteString(p.Literal)
			}
		}
		return b.String(), true
	}
	for _, p := range t.Parts {
		if p.Expr == "" {
			continue
		}
		switch p.typ {
		case "int":
			return 1, true
		case "float64":
			return 1.5, true
		case "string":
			return "x", true
		case "bool":
			return false, true
		case "[]interface {}":
			return []any{}, true
		case "map[string]interface {}", "map[string]string":
			return map[string]any{}, true
		}
	}
	return nil, false
}

// lookupKey returns the key node of prop in the mapping at loc.
func lookupKey(with *yaml.Node, loc []string, prop string) *yaml.Node {
	n := lookupNode(with, loc)
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == prop {
			return n.Content[i]
		}
	}
	return nil
}

func keyLine(with *yaml.Node, loc []string, prop string) int {
	if k := lookupKey(with, loc, prop); k != nil {
		return k.Line*10000 + k.Column
	}
	return 0
}

// schemaProperties lists the property names a schema declares at loc
// (top level only; nested locations get no suggestions).
func schemaProperties(schema []byte, loc []string) []string {
	if len(loc) != 0 {
		return nil
	}
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(schema, &doc) != nil {
		return nil
	}
	names := make([]string, 0, len(doc.Properties))
	for n := range doc.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func lookupNode(n *yaml.Node, loc []string) *yaml.Node {
	for _, tok := range loc {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil {
			return nil
		}
		switch n.Kind {
		case yaml.MappingNode:
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == tok {
					next = n.Content[i+1]
					break
				}
			}
			n = next
		case yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				return nil
			}
			n = n.Content[i]
		default:
			return nil
		}
	}
	return n
}

// schemaLeaves flattens a validation error tree to the errors that say
// something specific, sorted by instance location.
func schemaLeaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	var out []*jsonschema.ValidationError
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, e)
			return
		}
		switch e.ErrorKind.(type) {
		case *kind.AnyOf, *kind.OneOf:
			// Report the alternatives that take the value's type (a list
			// command with a bad item: the item, not "want string"); when
			// none does, one "got X, want A or B".
			here := strings.Join(e.InstanceLocation, "/")
			var fitting []*jsonschema.ValidationError
			merged := &kind.Type{}
			for _, c := range e.Causes {
				if t := onlyTypeAt(c, here); t != nil {
					merged.Got = t.Got
					for _, w := range t.Want {
						if !slices.Contains(merged.Want, w) {
							merged.Want = append(merged.Want, w)
						}
					}
				} else {
					fitting = append(fitting, c)
				}
			}
			if len(fitting) > 0 {
				for _, c := range fitting {
					walk(c)
				}
				return
			}
			if merged.Got != "" {
				out = append(out, &jsonschema.ValidationError{SchemaURL: e.SchemaURL, InstanceLocation: e.InstanceLocation, ErrorKind: merged})
				return
			}
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Join(out[i].InstanceLocation, "/") < strings.Join(out[j].InstanceLocation, "/")
	})
	return out
}

// onlyTypeAt returns the type error of an alternative that failed only
// because the value at the JSON pointer here (tokens joined by "/") has
// another type, else nil.
func onlyTypeAt(e *jsonschema.ValidationError, here string) *kind.Type {
	for len(e.Causes) == 1 {
		e = e.Causes[0]
	}
	t, ok := e.ErrorKind.(*kind.Type)
	if len(e.Causes) != 0 || !ok || strings.Join(e.InstanceLocation, "/") != here {
		return nil
	}
	return t
}

// typeRefused reports whether the error tree e says that the value at the
// JSON pointer ptr has a type the schema cannot take. An anyOf or oneOf at
// ptr refuses the type only if every alternative does: a templated string
// stands in for any string, so an alternative that wants a string with a
// pattern still takes it.
func typeRefused(e *jsonschema.ValidationError, ptr string) bool {
	here := "/"+strings.Join(e.InstanceLocation, "/") == ptr
	switch e.ErrorKind.(type) {
	case *kind.Type:
		return here
	case *kind.AnyOf, *kind.OneOf:
		if here {
			if len(e.Causes) == 0 {
				return false // oneOf matched several alternatives: the type fits
			}
			for _, c := range e.Causes {
				if !typeRefused(c, ptr) {
					return false
				}
			}
			return true
		}
	}
	for _, c := range e.Causes {
		if typeRefused(c, ptr) {
			return true
		}
	}
	return false
}

func kindOf(e *jsonschema.ValidationError) string {
	switch e.ErrorKind.(type) {
	case *kind.Type:
		return "type"
	}
	return ""
}

var printer = message.NewPrinter(language.English)

func schemaMessage(e *jsonschema.ValidationError) string {
	return e.ErrorKind.LocalizedString(printer)
}
