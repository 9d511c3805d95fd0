package plugins

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// WildcardOutput as an [OutputSpec] name declares that outputs with other
// names may appear.
const WildcardOutput = "*"

// ValidateOutputName checks an output name: a letter or "_" followed by
// letters, digits or "_", so that `stages.<id>.outputs.<name>` is a valid
// expression.
func ValidateOutputName(name string) error {
	if name == "" {
		return fmt.Errorf("empty output name")
	}
	for i, c := range name {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return fmt.Errorf("output name %q: use letters, digits and '_', starting with a letter or '_'", truncate(name, 40))
		}
	}
	return nil
}

// CheckDescriptor reports everything that keeps the host from using a
// descriptor: a bad name, no version, a `with` schema that is not a JSON
// object or boolean, bad or duplicate output names, unknown output types,
// and no protocol version in common. The error wraps [ErrIncompatible].
func CheckDescriptor(d Descriptor) error {
	var problems []string
	if err := ValidateName(d.Name); err != nil {
		problems = append(problems, err.Error())
	}
	if d.Version == "" {
		problems = append(problems, "empty version")
	}
	if len(d.WithSchema) > 0 {
		var schema any
		if err := json.Unmarshal(d.WithSchema, &schema); err != nil {
			problems = append(problems, fmt.Sprintf("with schema is not valid JSON: %v", err))
		} else if _, isObj := schema.(map[string]any); !isObj {
			if _, isBool := schema.(bool); !isBool {
				problems = append(problems, "with schema is neither a JSON object nor a boolean")
			}
		}
	}
	seen := map[string]bool{}
	for i, o := range d.Outputs {
		if o.Name != WildcardOutput {
			if err := ValidateOutputName(o.Name); err != nil {
				problems = append(problems, fmt.Sprintf("output %d: %v", i+1, err))
			}
		}
		if seen[o.Name] {
			problems = append(problems, fmt.Sprintf("output %q declared twice", o.Name))
		}
		seen[o.Name] = true
		if !slices.Contains(OutputTypes(), o.Type) {
			problems = append(problems, fmt.Sprintf("output %q: unknown type %q (want one of %s)", o.Name, o.Type, strings.Join(OutputTypes(), ", ")))
		}
	}
	if !slices.Contains(d.ProtocolVersions, ProtocolVersion) {
		problems = append(problems, fmt.Sprintf("speaks protocol versions %v, mspipe speaks %d", d.ProtocolVersions, ProtocolVersion))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrIncompatible, strings.Join(problems, "; "))
	}
	return nil
}

// CheckOutputs checks the outputs of a run against the descriptor's
// declared outputs and normalises them: floats are float64 even when the
// plugin sent an integer, relative paths are joined to workDir. Every
// problem is reported, in an error wrapping [ErrBadOutput].
func CheckOutputs(d Descriptor, workDir string, outputs map[string]any) (map[string]any, error) {
	if err := CheckOutputSize(outputs); err != nil {
		return nil, fmt.Errorf("stage %q: %w", d.Name, err)
	}
	declared := map[string]OutputSpec{}
	var wildcard *OutputSpec
	for _, o := range d.Outputs {
		if o.Name == WildcardOutput {
			wildcard = &o
			continue
		}
		declared[o.Name] = o
	}
	var problems []string
	checked := make(map[string]any, len(outputs))
	names := make([]string, 0, len(outputs))
	for name := range outputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		spec, ok := declared[name]
		if !ok {
			if wildcard == nil {
				problems = append(problems, fmt.Sprintf("output %q is not declared", truncate(name, 40)))
				continue
			}
			if err := ValidateOutputName(name); err != nil {
				problems = append(problems, err.Error())
				continue
			}
			spec = *wildcard
		}
		v, err := convertOutput(spec.Type, outputs[name], workDir)
		if err != nil {
			problems = append(problems, fmt.Sprintf("output %q: %v", name, err))
			continue
		}
		checked[name] = v
	}
	for _, o := range d.Outputs {
		if _, ok := outputs[o.Name]; !ok && o.Name != WildcardOutput {
			problems = append(problems, fmt.Sprintf("output %q is declared but missing", o.Name))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("stage %q: %w: %s", d.Name, ErrBadOutput, strings.Join(problems, "; "))
	}
	return checked, nil
}

func convertOutput(typ string, v any, workDir string) (any, error) {
	ok := false
	switch typ {
	case TypeAny:
		return v, nil
	case TypeString:
		_, ok = v.(string)
	case TypePath:
		if p, isStr := v.(string); isStr {
			if p == "" {
				return nil, fmt.Errorf("want a path, got an empty string")
			}
			if !filepath.IsAbs(p) && workDir != "" {
				p = filepath.Join(workDir, p)
			}
			return p, nil
		}
	case TypeInt:
		_, ok = v.(int64)
	case TypeFloat:
		switch x := v.(type) {
		case float64:
			return x, nil
		case int64:
			return float64(x), nil
		}
	case TypeBool:
		_, ok = v.(bool)
	case TypeList:
		_, ok = v.([]any)
	case TypeMap:
		_, ok = v.(map[string]any)
	default:
		return nil, fmt.Errorf("unknown type %q", typ)
	}
	if !ok {
		return nil, fmt.Errorf("want %s, got %s", typ, jsonKind(v))
	}
	return v, nil
}
