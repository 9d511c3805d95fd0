package plugins

import (
	"fmt"
	"slices"
	"strings"
)

// Info describes a built-in stage for the [Registry]. New must have no side
// effects: it is called only when the stage is served.
type Info struct {
	Name string       // stage name, e.g. "exec", "npu/train"
	New  func() Stage // returns a fresh implementation
}

// Registry holds the built-in stages. The CLI builds one value at start-up;
// there is no global registry. A Registry is not safe for concurrent
// Register calls.
type Registry struct {
	stages map[string]Info
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{stages: map[string]Info{}}
}

// Register adds a built-in stage. It rejects a badly formed or duplicate
// name and a nil constructor.
func (r *Registry) Register(info Info) error {
	if err := ValidateName(info.Name); err != nil {
		return err
	}
	if info.New == nil {
		return fmt.Errorf("register stage %q: no constructor", info.Name)
	}
	if _, dup := r.stages[info.Name]; dup {
		return fmt.Errorf("register stage %q: %w", info.Name, ErrDuplicate)
	}
	r.stages[info.Name] = info
	return nil
}

// Lookup returns the built-in stage with the given name.
func (r *Registry) Lookup(name string) (Info, bool) {
	info, ok := r.stages[name]
	return info, ok
}

// Names returns the names of all built-in stages, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.stages))
	for name := range r.stages {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// maxNameLen bounds stage names; a binary name adds 13 bytes to it.
const maxNameLen = 128

// ValidateName checks a stage name: one or more segments separated by "/",
// each a lower-case letter followed by lower-case letters, digits, "_" or
// "-" ("exec", "npu/train", "acme/data-augment").
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("%w %q: longer than %d bytes", ErrInvalidName, truncate(name, 40), maxNameLen)
	}
	for i, seg := range strings.Split(name, "/") {
		if seg == "" {
			return fmt.Errorf("%w %q: empty segment %d", ErrInvalidName, name, i+1)
		}
		for j, c := range seg {
			switch {
			case 'a' <= c && c <= 'z':
			case j > 0 && ('0' <= c && c <= '9' || c == '_' || c == '-'):
			case j == 0:
				return fmt.Errorf("%w %q: segment %q must start with a lower-case letter", ErrInvalidName, name, seg)
			default:
				return fmt.Errorf("%w %q: character %q not allowed (use a-z, 0-9, '_', '-' and '/')", ErrInvalidName, name, c)
			}
		}
	}
	return nil
}

// BinaryPrefix starts the file name of every external stage plugin.
const BinaryPrefix = "mspipe-stage-"

// BinaryName returns the file name of the external plugin for a stage name:
// "mspipe-stage-" followed by the name with "/" replaced by "-"
// ("acme/augment" → "mspipe-stage-acme-augment").
func BinaryName(name string) string {
	return BinaryPrefix + strings.ReplaceAll(name, "/", "-")
}
