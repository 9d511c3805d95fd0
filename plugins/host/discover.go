package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/plugins"
)

// ServeCommand is the hidden mspipe subcommand that serves a built-in stage:
// built-ins run as `mspipe __stage <name>`.
const ServeCommand = "__stage"

// Origins of a resolved stage, as reported to the user.
const (
	OriginBuiltin    = "built-in"
	OriginUsesPath   = "uses path"
	OriginLocalDir   = "./plugins"
	OriginPluginPath = "$MSPIPE_PLUGIN_PATH"
	OriginConfigDir  = "user config dir"
)

// SearchDir is a directory searched for plugin binaries.
type SearchDir struct {
	Dir    string
	Origin string // one of the Origin* constants
}

// DefaultSearchPath returns the directories searched for
// mspipe-stage-<name> binaries, in order: ./plugins (relative to the current
// directory), each directory of $MSPIPE_PLUGIN_PATH, then
// mspipe/plugins in the user's config directory ($XDG_CONFIG_HOME or
// ~/.config on Linux).
func DefaultSearchPath() []SearchDir {
	dirs := []SearchDir{{Dir: "plugins", Origin: OriginLocalDir}}
	for _, d := range filepath.SplitList(os.Getenv("MSPIPE_PLUGIN_PATH")) {
		if d != "" {
			dirs = append(dirs, SearchDir{Dir: d, Origin: OriginPluginPath})
		}
	}
	if cfg, err := os.UserConfigDir(); err == nil {
		dirs = append(dirs, SearchDir{Dir: filepath.Join(cfg, "mspipe", "plugins"), Origin: OriginConfigDir})
	}
	return dirs
}

// Resolver turns a spec's `uses:` into the executable to launch.
type Resolver struct {
	// Builtins are the built-in stages; nil means none.
	Builtins *Registry
	// Executable is the mspipe binary that serves built-ins; empty means
	// os.Executable().
	Executable string
	// SpecDir is the directory of the spec file; `uses: ./path` is relative
	// to it. Empty means the current directory.
	SpecDir string
	// SearchPath is searched for plugin binaries by name, in order;
	// DefaultSearchPath() is the usual value.
	SearchPath []SearchDir
}

// Resolved is the outcome of resolving a `uses:`.
type Resolved struct {
	Uses     string   // as written in the spec
	Name     string   // the stage name; empty for `uses: ./path`
	Builtin  bool     // served by the mspipe binary itself
	Path     string   // absolute path of the executable
	Args     []string // arguments; ["__stage", name] for a built-in
	Origin   string   // where it was found, one of the Origin* constants
	Shadowed []string // binaries of the same name that lost to this one
}

func (r Resolved) String() string {
	if r.Builtin {
		return fmt.Sprintf("%s (%s)", r.Uses, OriginBuiltin)
	}
	return fmt.Sprintf("%s → %s (%s)", r.Uses, r.Path, r.Origin)
}

// LaunchConfig returns the part of a LaunchConfig that resolution decides.
func (r Resolved) LaunchConfig() LaunchConfig {
	return LaunchConfig{Name: r.Name, Path: r.Path, Args: r.Args}
}

// Resolve finds what `uses` names. A value starting with "./", "../" or "/"
// is a path to a plugin binary, relative to SpecDir. Anything else is a
// stage name: a built-in stage if one has that name, else the first
// executable mspipe-stage-<name> (see [plugins.BinaryName]) along SearchPath.
func (r *Resolver) Resolve(uses string) (Resolved, error) {
	if IsPathRef(uses) {
		return r.resolvePath(uses)
	}
	if err := plugins.ValidateName(uses); err != nil {
		return Resolved{}, fmt.Errorf("uses %q: %w", uses, err)
	}
	found, unusable := r.search(uses)
	if r.Builtins != nil {
		if _, ok := r.Builtins.Lookup(uses); ok {
			exe := r.Executable
			if exe == "" {
				var err error
				if exe, err = os.Executable(); err != nil {
					return Resolved{}, fmt.Errorf("uses %q: locate the mspipe binary for built-in stages: %w", uses, err)
				}
			}
			res := Resolved{Uses: uses, Name: uses, Builtin: true, Path: exe, Args: []string{ServeCommand, uses}, Origin: OriginBuiltin}
			for _, f := range found {
				res.Shadowed = append(res.Shadowed, f.Dir)
			}
			return res, nil
		}
	}
	if len(found) > 0 {
		res := Resolved{Uses: uses, Name: uses, Path: found[0].Dir, Origin: found[0].Origin}
		for _, f := range found[1:] {
			res.Shadowed = append(res.Shadowed, f.Dir)
		}
		return res, nil
	}
	var where []string
	for _, d := range r.SearchPath {
		where = append(where, d.Dir)
	}
	msg := fmt.Sprintf("uses %q: %v: no built-in stage has this name", uses, ErrStageNotFound)
	if r.Builtins != nil {
		msg += fmt.Sprintf(" (built-ins: %s)", strings.Join(r.Builtins.Names(), ", "))
	}
	msg += fmt.Sprintf(" and there is no executable %s", plugins.BinaryName(uses))
	if len(where) > 0 {
		msg += " in " + strings.Join(where, ", ")
	}
	for _, u := range unusable {
		msg += "; " + u
	}
	return Resolved{}, notFoundError{msg}
}

// notFoundError carries a long message and still matches ErrStageNotFound.
type notFoundError struct{ msg string }

func (e notFoundError) Error() string { return e.msg }
func (e notFoundError) Unwrap() error { return ErrStageNotFound }

// IsPathRef reports whether uses names a plugin binary by path (./x,
// ../x or absolute, relative to the spec) rather than a stage by name.
func IsPathRef(uses string) bool {
	return strings.HasPrefix(uses, "./") || strings.HasPrefix(uses, "../") || filepath.IsAbs(uses)
}

func (r *Resolver) resolvePath(uses string) (Resolved, error) {
	p := uses
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.SpecDir, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return Resolved{}, fmt.Errorf("uses %q: %w", uses, err)
	}
	if err := checkExecutable(abs); err != nil {
		return Resolved{}, fmt.Errorf("uses %q: %w", uses, err)
	}
	return Resolved{Uses: uses, Path: abs, Origin: OriginUsesPath}, nil
}

// search lists the executables named BinaryName(name) along SearchPath,
// as SearchDirs whose Dir is the binary's absolute path, and describes the
// candidates it had to skip.
func (r *Resolver) search(name string) (found []SearchDir, unusable []string) {
	file := plugins.BinaryName(name)
	for _, d := range r.SearchPath {
		p, err := filepath.Abs(filepath.Join(d.Dir, file))
		if err != nil {
			continue
		}
		err = checkExecutable(p)
		switch {
		case err == nil:
			found = append(found, SearchDir{Dir: p, Origin: d.Origin})
		case !errors.Is(err, fs.ErrNotExist):
			unusable = append(unusable, err.Error())
		}
	}
	return found, unusable
}

func checkExecutable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable (chmod +x it)", path)
	}
	return nil
}

// Binary is a plugin executable found along a search path.
type Binary struct {
	// Name is the file name without BinaryPrefix ("acme-augment"); the
	// stage name is what the binary describes itself as.
	Name string
	Path string // absolute
	// ShadowedBy is the path of an earlier binary of the same file name,
	// which resolution picks instead; empty when this one wins.
	ShadowedBy string
}

// Binaries lists the executable mspipe-stage-* files along SearchPath, in
// search order and by name within a directory. Unreadable directories are
// skipped.
func (r *Resolver) Binaries() []Binary {
	var out []Binary
	first := map[string]string{}
	for _, d := range r.SearchPath {
		entries, err := os.ReadDir(d.Dir)
		if err != nil {
			continue
		}
		var names []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), plugins.BinaryPrefix) && !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		slices.Sort(names)
		for _, n := range names {
			abs, err := filepath.Abs(filepath.Join(d.Dir, n))
			if err != nil {
				continue
			}
			info, err := os.Stat(abs)
			if err != nil || info.Mode().Perm()&0o111 == 0 {
				continue
			}
			out = append(out, Binary{Name: strings.TrimPrefix(n, plugins.BinaryPrefix), Path: abs, ShadowedBy: first[n]})
			if first[n] == "" {
				first[n] = abs
			}
		}
	}
	return out
}
