package sdk

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mspipe/mspipe/plugins"
)

// schemaDialect is the JSON Schema version of derived schemas.
const schemaDialect = "https://json-schema.org/draft/2020-12/schema"

// Schemaer is implemented by types that supply their own JSON Schema.
type Schemaer interface {
	JSONSchema() map[string]any
}

// SchemaOf derives the JSON Schema of a `with` block from the struct type W
// (see the package documentation for the rules and tags).
func SchemaOf[W any]() (json.RawMessage, error) {
	var zero W
	return SchemaWithDefaults(zero)
}

// SchemaWithDefaults is SchemaOf with the `default` of each property taken
// from the fields of defaults that are not zero, so that one Go value is
// the single place a stage writes its defaults. A field that has a
// default both here and in its jsonschema tag is an error.
func SchemaWithDefaults[W any](defaults W) (json.RawMessage, error) {
	schema, err := schemaMap(reflect.ValueOf(&defaults).Elem())
	if err != nil {
		return nil, err
	}
	return json.Marshal(schema)
}

// schemaMap derives the schema of defaults' type, a struct or a pointer to
// one, with defaults' non-zero fields as defaults.
func schemaMap(defaults reflect.Value) (map[string]any, error) {
	t := defaults.Type()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
		if defaults.IsValid() && !defaults.IsNil() {
			defaults = defaults.Elem()
		} else {
			defaults = reflect.Value{}
		}
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("with type %s: want a struct", t)
	}
	s, err := typeSchema(t, nil)
	if err != nil {
		return nil, fmt.Errorf("with type %s: %w", t, err)
	}
	if defaults.IsValid() {
		if err := addDefaults(s, defaults); err != nil {
			return nil, fmt.Errorf("with type %s: %w", t, err)
		}
	}
	s["$schema"] = schemaDialect
	return s, nil
}

// addDefaults sets the default of each property of struct schema s whose
// field in v is not zero, naming fields as addFields does.
func addDefaults(s map[string]any, v reflect.Value) error {
	props, _ := s["properties"].(map[string]any)
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if tag == "-" || fv.IsZero() {
			continue
		}
		if f.Anonymous && name == "" {
			for fv.Kind() == reflect.Pointer {
				fv = fv.Elem()
			}
			if fv.Kind() == reflect.Struct {
				if err := addDefaults(s, fv); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		prop, ok := props[name].(map[string]any)
		if !ok {
			continue // a deeper field that encoding/json hides
		}
		if _, dup := prop["default"]; dup && !reflect.DeepEqual(prop["default"], ownDefault(f.Type)) {
			return fmt.Errorf("field %s: a default in its jsonschema tag and in the defaults value", f.Name)
		}
		raw, err := json.Marshal(fv.Interface())
		if err != nil {
			return fmt.Errorf("field %s: default: %w", f.Name, err)
		}
		d, err := plugins.DecodeJSON(raw)
		if err != nil {
			return fmt.Errorf("field %s: default: %w", f.Name, err)
		}
		prop["default"] = d
		if req, ok := s["required"].([]string); ok {
			if req = slices.DeleteFunc(req, func(r string) bool { return r == name }); len(req) == 0 {
				delete(s, "required")
			} else {
				s["required"] = req
			}
		}
	}
	return nil
}

// ownDefault returns the default a type's own JSONSchema gives, or nil.
func ownDefault(t reflect.Type) any {
	if s, ok := ownSchema(t); ok {
		return s["default"]
	}
	return nil
}

func typeSchema(t reflect.Type, stack []reflect.Type) (map[string]any, error) {
	if s, ok := ownSchema(t); ok {
		return s, nil
	}
	switch {
	case t == reflect.TypeFor[json.RawMessage]():
		return map[string]any{}, nil
	case t == reflect.TypeFor[time.Time]():
		return map[string]any{"type": "string", "format": "date-time"}, nil
	case implements(t, reflect.TypeFor[json.Unmarshaler]()):
		return map[string]any{}, nil // its own decoder decides
	case implements(t, reflect.TypeFor[encoding.TextUnmarshaler]()):
		return map[string]any{"type": "string"}, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeSchema(t.Elem(), stack)
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": int64(0)}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Interface:
		return map[string]any{}, nil
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}, nil
		}
		items, err := typeSchema(t.Elem(), stack)
		if err != nil {
			return nil, err
		}
		s := map[string]any{"type": "array", "items": items}
		if t.Kind() == reflect.Array {
			s["minItems"], s["maxItems"] = int64(t.Len()), int64(t.Len())
		}
		return s, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key type %s: only string keys are supported", t.Key())
		}
		values, err := typeSchema(t.Elem(), stack)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": values}, nil
	case reflect.Struct:
		return structSchema(t, stack)
	}
	return nil, fmt.Errorf("type %s cannot be part of a with block", t)
}

func ownSchema(t reflect.Type) (map[string]any, bool) {
	if t.Implements(reflect.TypeFor[Schemaer]()) && t.Kind() != reflect.Interface {
		return cloneSchema(reflect.Zero(t).Interface().(Schemaer).JSONSchema()), true
	}
	if pt := reflect.PointerTo(t); t.Kind() != reflect.Pointer && pt.Implements(reflect.TypeFor[Schemaer]()) {
		return cloneSchema(reflect.New(t).Interface().(Schemaer).JSONSchema()), true
	}
	return nil, false
}

func implements(t, iface reflect.Type) bool {
	return t.Kind() != reflect.Interface && (t.Implements(iface) || reflect.PointerTo(t).Implements(iface))
}

// cloneSchema copies the top level, so that tags never modify a map a
// JSONSchema method may return again.
func cloneSchema(s map[string]any) map[string]any {
	out := make(map[string]any, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

func structSchema(t reflect.Type, stack []reflect.Type) (map[string]any, error) {
	for _, seen := range stack {
		if seen == t {
			return nil, fmt.Errorf("recursive type %s is not supported", t)
		}
	}
	stack = append(stack, t)
	props := map[string]any{}
	var required []string
	if err := addFields(t, stack, props, &required); err != nil {
		return nil, err
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s, nil
}

// addFields adds the fields of struct t to props the way encoding/json sees
// them: embedded structs without a json name are flattened.
func addFields(t reflect.Type, stack []reflect.Type, props map[string]any, required *[]string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := addFields(ft, stack, props, required); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := props[name]; dup {
			continue // encoding/json: the shallower field wins
		}
		s, err := typeSchema(f.Type, stack)
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		if err := applyTags(s, f); err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		props[name] = s
		_, hasDefault := s["default"]
		if !hasDefault && !hasOpt(opts, "omitempty") && !hasOpt(opts, "omitzero") {
			*required = append(*required, name)
		}
	}
	return nil
}

func hasOpt(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// keywordKind says what value a keyword of the jsonschema tag takes.
func keywordKind(key string) string {
	switch key {
	case "description", "title", "pattern", "format":
		return "string"
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf":
		return "number"
	case "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties":
		return "count"
	case "deprecated":
		return "flag"
	case "enum", "default":
		return key
	}
	return ""
}

// itemKeyword reports whether a keyword on a slice field constrains its items.
func itemKeyword(key string) bool {
	switch key {
	case "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
		"multipleOf", "minLength", "maxLength", "enum":
		return true
	}
	return false
}

func applyTags(s map[string]any, f reflect.StructField) error {
	if d := f.Tag.Get("description"); d != "" {
		s["description"] = d
	}
	tag, ok := f.Tag.Lookup("jsonschema")
	if !ok || tag == "" {
		return nil
	}
	for _, part := range splitTag(tag) {
		key, value, hasValue := strings.Cut(part, "=")
		key = strings.TrimSpace(key)
		kind := keywordKind(key)
		target := s
		if items, isArray := s["items"].(map[string]any); isArray && itemKeyword(key) {
			target = items
		}
		switch {
		case kind == "":
			return fmt.Errorf("jsonschema tag: unknown keyword %q", key)
		case kind == "flag":
			target[key] = true
		case !hasValue:
			return fmt.Errorf("jsonschema tag: %q needs a value (%s=...)", key, key)
		case kind == "string":
			target[key] = value
		case kind == "number":
			n, err := plugins.DecodeJSON([]byte(value))
			switch n.(type) {
			case int64, float64:
			default:
				err = fmt.Errorf("not a number")
			}
			if err != nil {
				return fmt.Errorf("jsonschema tag: %s=%q is not a number", key, value)
			}
			target[key] = n
		case kind == "count":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("jsonschema tag: %s=%q is not a non-negative integer", key, value)
			}
			target[key] = n
		case kind == "enum":
			var values []any
			for _, v := range strings.Split(value, "|") {
				values = append(values, tagValue(target, v))
			}
			target[key] = values
		case kind == "default":
			s[key] = tagValue(s, value)
		}
	}
	return nil
}

// tagValue reads a tag value as the schema's type: verbatim for a string,
// else as JSON, falling back to the verbatim string.
func tagValue(s map[string]any, v string) any {
	if s["type"] == "string" {
		return v
	}
	if x, err := plugins.DecodeJSON([]byte(v)); err == nil {
		return x
	}
	return v
}

// splitTag splits on commas not escaped as `\,`.
func splitTag(tag string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(tag); i++ {
		switch {
		case tag[i] == '\\' && i+1 < len(tag) && tag[i+1] == ',':
			cur.WriteByte(',')
			i++
		case tag[i] == ',':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(tag[i])
		}
	}
	return append(parts, cur.String())
}
