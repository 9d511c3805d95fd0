package sdk

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mspipe/mspipe/plugins"
)

// The SDK checks `with` blocks itself instead of linking a JSON Schema
// library into every plugin binary: the initialisation of such a library
// cost each plugin start about 10 ms. The package documentation lists the
// keywords checked; the rest are left to mspipe, which validates against
// the whole schema before a pipeline runs. format and content* are
// annotations, as in JSON Schema 2020-12 by default.

// schemaNode is a compiled schema. A nil *schemaNode accepts anything.
type schemaNode struct {
	never bool     // the schema false
	types []string // "type"; empty means any

	enum     []any
	hasConst bool
	constant any

	minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf any // int64, float64 or nil

	minLength, maxLength int64 // -1 when absent, as are the counts below
	pattern              *regexp.Regexp

	items       *schemaNode
	prefixItems []*schemaNode
	minItems    int64
	maxItems    int64
	uniqueItems bool

	properties        map[string]*schemaNode
	patternProperties []patternSchema
	additional        *schemaNode
	required          []string
	dependentRequired map[string][]string
	minProperties     int64
	maxProperties     int64

	allOf, anyOf, oneOf []*schemaNode
	not                 *schemaNode
}

type patternSchema struct {
	re     *regexp.Regexp
	schema *schemaNode
}

// compileWithSchema compiles the schema of a `with` block.
func compileWithSchema(schema map[string]any) (*schemaNode, error) {
	data, err := plugins.EncodeJSON(schema)
	if err != nil {
		return nil, fmt.Errorf("encode with schema: %w", err)
	}
	doc, err := plugins.DecodeJSON(data) // numbers become int64 or float64, as in values
	if err != nil {
		return nil, fmt.Errorf("decode with schema: %w", err)
	}
	return compileSchema(doc, "")
}

// compileSchema compiles a schema decoded by plugins.DecodeJSON. at is
// the keyword location, for errors.
func compileSchema(s any, at string) (*schemaNode, error) {
	switch x := s.(type) {
	case bool:
		if x {
			return nil, nil
		}
		return &schemaNode{never: true}, nil
	case map[string]any:
		return compileObject(x, at)
	}
	return nil, fmt.Errorf("%s: want a schema (object or boolean), got %T", orRoot(at), s)
}

func compileObject(m map[string]any, at string) (*schemaNode, error) {
	n := &schemaNode{minLength: -1, maxLength: -1, minItems: -1, maxItems: -1, minProperties: -1, maxProperties: -1}
	for key, v := range m {
		var err error
		bad := func(want string) error { return fmt.Errorf("%s/%s: want %s, got %v", orRoot(at), key, want, v) }
		number := func() (any, error) {
			if _, isNum := toFloat(v); !isNum {
				return nil, bad("a number")
			}
			return v, nil
		}
		count := func() (int64, error) {
			if c, isInt := v.(int64); isInt && c >= 0 {
				return c, nil
			}
			return -1, bad("a non-negative integer")
		}
		list := func() ([]*schemaNode, error) {
			raw, isList := v.([]any)
			if !isList {
				return nil, bad("an array of schemas")
			}
			out := make([]*schemaNode, len(raw))
			for i, r := range raw {
				var err error
				if out[i], err = compileSchema(r, at+"/"+key+"/"+strconv.Itoa(i)); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
		switch key {
		case "type":
			n.types, err = typeList(v)
			if err != nil {
				err = bad("a JSON type name or a list of them")
			}
		case "enum":
			if n.enum, _ = v.([]any); n.enum == nil {
				err = bad("an array")
			}
		case "const":
			n.hasConst, n.constant = true, v
		case "minimum":
			n.minimum, err = number()
		case "maximum":
			n.maximum, err = number()
		case "exclusiveMinimum":
			n.exclusiveMinimum, err = number()
		case "exclusiveMaximum":
			n.exclusiveMaximum, err = number()
		case "multipleOf":
			if f, _ := toFloat(v); f <= 0 {
				err = bad("a number above 0")
			}
			n.multipleOf = v
		case "minLength":
			n.minLength, err = count()
		case "maxLength":
			n.maxLength, err = count()
		case "minItems":
			n.minItems, err = count()
		case "maxItems":
			n.maxItems, err = count()
		case "minProperties":
			n.minProperties, err = count()
		case "maxProperties":
			n.maxProperties, err = count()
		case "pattern":
			p, isString := v.(string)
			if !isString {
				err = bad("a string")
				break
			}
			if n.pattern, err = regexp.Compile(p); err != nil {
				err = fmt.Errorf("%s/pattern: %w", orRoot(at), err)
			}
		case "uniqueItems":
			var isBool bool
			if n.uniqueItems, isBool = v.(bool); !isBool {
				err = bad("a boolean")
			}
		case "items":
			n.items, err = compileSchema(v, at+"/"+key)
		case "prefixItems":
			n.prefixItems, err = list()
		case "properties":
			n.properties, err = compileProperties(v, at+"/"+key)
		case "patternProperties":
			var props map[string]*schemaNode
			if props, err = compileProperties(v, at+"/"+key); err != nil {
				break
			}
			for p, s := range props {
				re, rerr := regexp.Compile(p)
				if rerr != nil {
					return nil, fmt.Errorf("%s/patternProperties: %w", orRoot(at), rerr)
				}
				n.patternProperties = append(n.patternProperties, patternSchema{re, s})
			}
		case "additionalProperties":
			n.additional, err = compileSchema(v, at+"/"+key)
		case "required":
			var isList bool
			if n.required, isList = stringList(v); !isList {
				err = bad("an array of strings")
			}
		case "dependentRequired":
			deps, isObj := v.(map[string]any)
			if !isObj {
				err = bad("an object of string arrays")
				break
			}
			n.dependentRequired = make(map[string][]string, len(deps))
			for name, d := range deps {
				need, isList := stringList(d)
				if !isList {
					err = bad("an object of string arrays")
				}
				n.dependentRequired[name] = need
			}
		case "allOf":
			n.allOf, err = list()
		case "anyOf":
			n.anyOf, err = list()
		case "oneOf":
			n.oneOf, err = list()
		case "not":
			n.not, err = compileSchema(v, at+"/"+key)
			if err == nil && n.not == nil { // not: true rejects everything
				n.not = &schemaNode{}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}

func compileProperties(v any, at string) (map[string]*schemaNode, error) {
	props, isObj := v.(map[string]any)
	if !isObj {
		return nil, fmt.Errorf("%s: want an object of schemas, got %v", orRoot(at), v)
	}
	out := make(map[string]*schemaNode, len(props))
	for name, ps := range props {
		s, err := compileSchema(ps, at+"/"+pointerEscape(name))
		if err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, nil
}

var jsonTypes = []string{"null", "boolean", "integer", "number", "string", "array", "object"}

func typeList(v any) ([]string, error) {
	var types []string
	switch t := v.(type) {
	case string:
		types = []string{t}
	case []any:
		var isList bool
		if types, isList = stringList(t); !isList {
			return nil, errors.New("not a list of strings")
		}
	}
	if len(types) == 0 {
		return nil, errors.New("no type")
	}
	for _, t := range types {
		if !slices.Contains(jsonTypes, t) {
			return nil, fmt.Errorf("unknown type %q", t)
		}
	}
	return types, nil
}

func stringList(v any) ([]string, bool) {
	raw, isList := v.([]any)
	if !isList {
		return nil, false
	}
	out := make([]string, len(raw))
	for i, r := range raw {
		s, isString := r.(string)
		if !isString {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

func orRoot(at string) string {
	if at == "" {
		return "schema"
	}
	return "schema " + at
}

// check returns the problems of v, a value decoded by plugins.DecodeJSON,
// against n, sorted by path. path is v's JSON pointer.
func (n *schemaNode) check(v any, path string) []plugins.Problem {
	var problems []plugins.Problem
	n.collect(v, path, &problems)
	slices.SortFunc(problems, func(a, b plugins.Problem) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), strings.Compare(a.Message, b.Message))
	})
	return slices.Compact(problems)
}

func (n *schemaNode) collect(v any, path string, out *[]plugins.Problem) {
	if n == nil {
		return
	}
	add := func(format string, args ...any) {
		*out = append(*out, plugins.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if n.never {
		add("not allowed here")
		return
	}
	if len(n.types) > 0 && !slices.ContainsFunc(n.types, func(t string) bool { return hasType(v, t) }) {
		add("want %s, got %s", strings.Join(n.types, " or "), kindOf(v))
		return // the other keywords would only repeat the mismatch
	}
	if n.enum != nil && !slices.ContainsFunc(n.enum, func(e any) bool { return jsonEqual(e, v) }) {
		vals := make([]string, len(n.enum))
		for i, e := range n.enum {
			vals[i] = showJSON(e)
		}
		add("%s is not one of %s", showJSON(v), strings.Join(vals, ", "))
	}
	if n.hasConst && !jsonEqual(n.constant, v) {
		add("want %s, got %s", showJSON(n.constant), showJSON(v))
	}
	switch x := v.(type) {
	case int64, float64:
		n.checkNumber(x, add)
	case string:
		length := int64(utf8.RuneCountInString(x))
		if n.minLength >= 0 && length < n.minLength {
			add("want at least %s, got %d", plural(n.minLength, "character"), length)
		}
		if n.maxLength >= 0 && length > n.maxLength {
			add("want at most %s, got %d", plural(n.maxLength, "character"), length)
		}
		if n.pattern != nil && !n.pattern.MatchString(x) {
			add("%s does not match the pattern %s", showJSON(x), n.pattern)
		}
	case []any:
		n.checkArray(x, path, out, add)
	case map[string]any:
		n.checkObject(x, path, out, add)
	}
	for _, s := range n.allOf {
		s.collect(v, path, out)
	}
	if n.anyOf != nil {
		if matching := matches(n.anyOf, v); len(matching) == 0 {
			explainAlternatives(n.anyOf, v, path, out)
		}
	}
	if n.oneOf != nil {
		switch matching := matches(n.oneOf, v); len(matching) {
		case 0:
			explainAlternatives(n.oneOf, v, path, out)
		case 1:
		default:
			add("matches more than one alternative of oneOf (%d and %d)", matching[0], matching[1])
		}
	}
	if n.not != nil && n.not.valid(v) {
		add("not allowed here: it matches the schema under \"not\"")
	}
}

func (n *schemaNode) checkNumber(x any, add func(string, ...any)) {
	if n.minimum != nil && compareNumbers(x, n.minimum) < 0 {
		add("want at least %s, got %s", showJSON(n.minimum), showJSON(x))
	}
	if n.exclusiveMinimum != nil && compareNumbers(x, n.exclusiveMinimum) <= 0 {
		add("want more than %s, got %s", showJSON(n.exclusiveMinimum), showJSON(x))
	}
	if n.maximum != nil && compareNumbers(x, n.maximum) > 0 {
		add("want at most %s, got %s", showJSON(n.maximum), showJSON(x))
	}
	if n.exclusiveMaximum != nil && compareNumbers(x, n.exclusiveMaximum) >= 0 {
		add("want less than %s, got %s", showJSON(n.exclusiveMaximum), showJSON(x))
	}
	if n.multipleOf != nil && !isMultiple(x, n.multipleOf) {
		add("want a multiple of %s, got %s", showJSON(n.multipleOf), showJSON(x))
	}
}

func (n *schemaNode) checkArray(x []any, path string, out *[]plugins.Problem, add func(string, ...any)) {
	count := int64(len(x))
	if n.minItems >= 0 && count < n.minItems {
		add("want at least %s, got %d", plural(n.minItems, "item"), count)
	}
	if n.maxItems >= 0 && count > n.maxItems {
		add("want at most %s, got %d", plural(n.maxItems, "item"), count)
	}
	for i, e := range x {
		s := n.items
		if i < len(n.prefixItems) {
			s = n.prefixItems[i]
		}
		s.collect(e, path+"/"+strconv.Itoa(i), out)
	}
	if n.uniqueItems {
	dup:
		for i := range x {
			for j := i + 1; j < len(x); j++ {
				if jsonEqual(x[i], x[j]) {
					add("items %d and %d are equal; want unique items", i, j)
					break dup
				}
			}
		}
	}
}

func (n *schemaNode) checkObject(x map[string]any, path string, out *[]plugins.Problem, add func(string, ...any)) {
	count := int64(len(x))
	if n.minProperties >= 0 && count < n.minProperties {
		add("want at least %s, got %d", plural(n.minProperties, "property"), count)
	}
	if n.maxProperties >= 0 && count > n.maxProperties {
		add("want at most %s, got %d", plural(n.maxProperties, "property"), count)
	}
	for _, name := range n.required {
		if _, present := x[name]; !present {
			add("missing required property %q", name)
		}
	}
	for name, needs := range n.dependentRequired {
		if _, present := x[name]; !present {
			continue
		}
		for _, need := range needs {
			if _, present := x[need]; !present {
				add("property %q requires property %q", name, need)
			}
		}
	}
	for name, e := range x {
		at := path + "/" + pointerEscape(name)
		s, declared := n.properties[name]
		s.collect(e, at, out)
		for _, pp := range n.patternProperties {
			if pp.re.MatchString(name) {
				declared = true
				pp.schema.collect(e, at, out)
			}
		}
		if declared {
			continue
		}
		if n.additional != nil && n.additional.never {
			add("unknown property %q", name)
			continue
		}
		n.additional.collect(e, at, out)
	}
}

// valid reports whether v matches n.
func (n *schemaNode) valid(v any) bool {
	var problems []plugins.Problem
	n.collect(v, "", &problems)
	return len(problems) == 0
}

// matches returns the indexes of the alternatives v matches.
func matches(alts []*schemaNode, v any) []int {
	var out []int
	for i, s := range alts {
		if s.valid(v) {
			out = append(out, i)
		}
	}
	return out
}

// explainAlternatives reports why v matches none of alts. The alternatives
// meant for v's type say the most, as for a duration that is a string or a
// number: "soon" is then reported against the string alternative only.
// When no alternative takes v's type, the accepted types are the message.
func explainAlternatives(alts []*schemaNode, v any, path string, out *[]plugins.Problem) {
	var types []string
	var fitting []*schemaNode
	for _, s := range alts {
		if s == nil || len(s.types) == 0 || slices.ContainsFunc(s.types, func(t string) bool { return hasType(v, t) }) {
			fitting = append(fitting, s)
			continue
		}
		for _, t := range s.types {
			if !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
	}
	if len(fitting) == 0 {
		*out = append(*out, plugins.Problem{Path: path, Message: fmt.Sprintf("want %s, got %s", strings.Join(types, " or "), kindOf(v))})
		return
	}
	for _, s := range fitting {
		s.collect(v, path, out)
	}
}

func hasType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case int64:
		return t == "integer" || t == "number"
	case float64:
		return t == "number" || t == "integer" && x == math.Trunc(x) && !math.IsInf(x, 0)
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

// kindOf names v's JSON type for messages.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case int64:
		return "integer"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// compareNumbers compares two numbers, exactly when both are integers.
func compareNumbers(a, b any) int {
	ai, aInt := a.(int64)
	bi, bInt := b.(int64)
	if aInt && bInt {
		return cmp.Compare(ai, bi)
	}
	af, _ := toFloat(a)
	bf, _ := toFloat(b)
	return cmp.Compare(af, bf)
}

// isMultiple reports whether x is an integer multiple of m (m > 0). Floats
// count as the decimal numbers they print as, so that 0.3 is a multiple
// of 0.1 as in the JSON text.
func isMultiple(x, m any) bool {
	xi, xInt := x.(int64)
	mi, mInt := m.(int64)
	if xInt && mInt {
		return xi%mi == 0
	}
	q := new(big.Rat).Quo(decimal(x), decimal(m))
	return q.IsInt()
}

func decimal(v any) *big.Rat {
	switch x := v.(type) {
	case int64:
		return new(big.Rat).SetInt64(x)
	case float64:
		if r, ok := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64)); ok {
			return r
		}
	}
	return new(big.Rat)
}

// jsonEqual is JSON equality: numbers by value, arrays by element,
// objects by member.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case int64, float64:
		if _, isNum := toFloat(b); !isNum {
			return false
		}
		return compareNumbers(x, b) == 0
	case []any:
		y, isList := b.([]any)
		return isList && slices.EqualFunc(x, y, jsonEqual)
	case map[string]any:
		y, isObj := b.(map[string]any)
		if !isObj || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, present := y[k]
			if !present || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	return a == b
}

// showJSON renders a value as JSON for a message, shortened if long.
func showJSON(v any) string {
	data, err := plugins.EncodeJSON(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const max = 60
	if len(data) > max {
		return string(data[:max]) + "..."
	}
	return string(data)
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
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
