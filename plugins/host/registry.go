package host

import (
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/plugins"
)

// Registry holds the built-in stages, each registered with its
// [plugins.Info]. The CLI builds one value at start-up; there is no global
// registry. A Registry is not safe for concurrent Register calls.
type Registry struct {
	stages map[string]plugins.Info
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{stages: map[string]plugins.Info{}}
}

// Register adds a built-in stage. It rejects a badly formed or duplicate
// name and a nil constructor.
func (r *Registry) Register(info plugins.Info) error {
	if err := plugins.ValidateName(info.Name); err != nil {
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
func (r *Registry) Lookup(name string) (plugins.Info, bool) {
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
