package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
	"github.com/mspipe/mspipe/spec"
)

// declaredDescriptor is the JSON form of a stage declaration: a built-in
// stage whose declaration ships with a build although its implementation
// has not landed yet.
type declaredDescriptor struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	With        json.RawMessage `json:"with"`
	Outputs     []struct {
		Name        string `json:"name"`
		Type        string `json:"type"`
		Description string `json:"description"`
	} `json:"outputs"`
}

func (d declaredDescriptor) descriptor() plugins.Descriptor {
	out := plugins.Descriptor{Name: d.Name, Description: d.Description, WithSchema: d.With}
	for _, o := range d.Outputs {
		out.Outputs = append(out.Outputs, plugins.OutputSpec{Name: o.Name, Type: o.Type, Description: o.Description})
	}
	return out
}

// Catalog knows every stage a spec can use — built-ins served by the mspipe
// binary, declared-only built-ins, and plugin binaries found by discovery —
// and is both the spec.Catalog for validation and the pipeline.Launcher
// for runs. What a stage declares is asked once per Catalog and kept. A
// Catalog is safe for concurrent use.
type Catalog struct {
	registry      *host.Registry
	resolver      *host.Resolver
	declared      map[string]plugins.Descriptor
	shellCommands []string
	exec          ExecPolicy
	uncheckedNote string
	// unbuiltWarns makes a plugin whose source is there but whose binary
	// is not built unchecked (a warning) instead of unknown; see AllowUnbuilt.
	unbuiltWarns bool

	mu        sync.Mutex
	described map[string]describedStage // by uses
	pins      map[string]string         // uses -> sha256 pin from the spec
	self      string                    // what built-ins were built from (builtFrom)
	// clients are the plugin processes started to describe a stage for
	// validation, kept for its Validate calls (see keptClient), by uses.
	clients map[string]*keptClient
	// pool keeps the processes of reusable built-ins between stages.
	pool pool
}

type describedStage struct {
	desc     plugins.Descriptor
	resolved host.Resolved
	err      error
}

var (
	_ spec.Catalog      = (*Catalog)(nil)
	_ pipeline.Launcher = (*Catalog)(nil)
)

// Config says what a [Catalog] offers.
type Config struct {
	// Resolver finds the stages; its Builtins are the built-in stages.
	Resolver *host.Resolver
	// Declarations are the declared-only built-ins, each the JSON
	// declaration of a stage (name, description, `with` schema, outputs)
	// that specs may use but that fails with ErrNotImplemented when run. A
	// declaration whose name is a registered built-in is ignored.
	Declarations [][]byte
	// ShellCommands names the built-ins whose with.command runs through a
	// shell (spec.StageInfo.ShellCommand), such as exec. A plugin binary of
	// the same name does not get that rule.
	ShellCommands []string
	// Exec says which plugin binaries Stage may start to ask what they
	// declare. The zero value, ExecAll, is what running a spec needs.
	Exec ExecPolicy
	// UncheckedNote ends the message of a stage Stage reports as
	// unchecked, such as how to let mspipe start it.
	UncheckedNote string
}

// ExecPolicy says which plugin binaries [Catalog.Stage] may start to read
// their declaration, so that checking a spec need not run code that came
// with it. Built-in stages are served by mspipe itself and are always
// described. Launch, Identity and List start binaries whatever the policy:
// they exist to run them.
type ExecPolicy uint8

const (
	// ExecAll starts every plugin binary.
	ExecAll ExecPolicy = iota
	// ExecPinned starts only binaries the spec pins by sha256 (a pin that
	// does not match refuses to start them, see [host.Launch]); Stage reports
	// any other binary as unchecked (spec.ErrUnchecked).
	ExecPinned
	// ExecNever starts no plugin binary; Stage reports each as unchecked.
	ExecNever
)

// New returns the catalog cfg describes.
func New(cfg Config) (*Catalog, error) {
	r := cfg.Resolver
	if r == nil {
		r = &host.Resolver{}
	}
	reg := r.Builtins
	if reg == nil {
		reg = host.NewRegistry()
	}
	c := &Catalog{
		registry:      reg,
		resolver:      r,
		declared:      map[string]plugins.Descriptor{},
		shellCommands: cfg.ShellCommands,
		exec:          cfg.Exec,
		uncheckedNote: cfg.UncheckedNote,
		described:     map[string]describedStage{},
		pins:          map[string]string{},
		clients:       map[string]*keptClient{},
	}
	for _, raw := range cfg.Declarations {
		var d declaredDescriptor
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("built-in stage declaration: %w", err)
		}
		if _, ok := reg.Lookup(d.Name); !ok {
			c.declared[d.Name] = d.descriptor()
		}
	}
	return c, nil
}

// UsePins makes the catalog check the sha256 pins a spec sets, so a binary
// that does not match is not even started to ask what it declares.
func (c *Catalog) UsePins(p *spec.Pipeline) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range p.Stages {
		if s.SHA256 != "" {
			c.pins[s.Uses] = s.SHA256
		}
	}
}

// AllowUnbuilt makes [Catalog.Stage] report a plugin that is not built
// but whose Go source is next to the spec ([host.PluginSource]) as unchecked
// (spec.ErrUnchecked: a warning that says how to build it) rather than as
// an error, so a fresh clone validates before anything is built. Running
// such a spec still fails; validate --strict does not call this.
func (c *Catalog) AllowUnbuilt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unbuiltWarns = true
}

// unbuiltSource is the source directory of the plugin uses names, when it
// is a plugin name (not a path) with a source next to the spec; else "".
func (c *Catalog) unbuiltSource(uses string) string {
	if host.IsPathRef(uses) {
		return ""
	}
	dir, ok := host.PluginSource(c.resolver.SpecDir, uses)
	if !ok {
		return ""
	}
	return dir
}

// unbuiltError says that the plugin uses names is not built and which
// command builds it; a warning (spec.ErrUnchecked) after AllowUnbuilt.
func (c *Catalog) unbuiltError(uses string) error {
	src := c.unbuiltSource(uses)
	msg := fmt.Sprintf("plugin %q is not built: its source is %s but there is no executable %s in ./plugins, $MSPIPE_PLUGIN_PATH or the user config dir; build it with `%s` (mspipe looks in ./plugins first)",
		uses, src, plugins.BinaryName(uses), host.BuildCommand(uses, src))
	c.mu.Lock()
	warn := c.unbuiltWarns
	c.mu.Unlock()
	if warn {
		return fmt.Errorf("%w: %s", spec.ErrUnchecked, msg)
	}
	return errors.New(msg)
}

// Names lists the built-in and declared stage names.
func (c *Catalog) Names() []string {
	names := c.registry.Names()
	for n := range c.declared {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// describeTimeout bounds starting a plugin binary to ask what it declares.
const describeTimeout = 10 * time.Second

// describe returns what the stage named by uses declares, starting its
// plugin binary if it is not a built-in. Results are memoized. With keep,
// a plugin process started for it stays for the stage's Validate calls.
func (c *Catalog) describe(ctx context.Context, uses string, keep bool) describedStage {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.described[uses]; ok {
		return d
	}
	d := c.describeLocked(ctx, uses, keep)
	c.described[uses] = d
	return d
}

func (c *Catalog) describeLocked(ctx context.Context, uses string, keep bool) describedStage {
	if desc, ok := c.declared[uses]; ok {
		return describedStage{desc: desc}
	}
	res, err := c.resolver.Resolve(uses)
	if err != nil {
		return describedStage{err: err}
	}
	if res.Builtin {
		info, _ := c.registry.Lookup(res.Name)
		desc, err := info.New().Describe(ctx)
		return describedStage{desc: desc, resolved: res, err: err}
	}
	cfg := res.LaunchConfig()
	cfg.SHA256 = c.pins[uses]
	if keep {
		kc, err := c.launchKeptLocked(ctx, uses, cfg)
		if err != nil {
			return describedStage{resolved: res, err: err}
		}
		desc, err := kc.client.Describe(ctx)
		return describedStage{desc: desc, resolved: res, err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	client, err := host.Launch(ctx, cfg)
	if err != nil {
		return describedStage{resolved: res, err: err}
	}
	defer client.Close()
	desc, err := client.Describe(ctx)
	return describedStage{desc: desc, resolved: res, err: err}
}

// Stage implements spec.Catalog. A plugin binary the catalog's ExecPolicy
// does not let it start is reported with spec.ErrUnchecked.
func (c *Catalog) Stage(uses string) (*spec.StageInfo, error) {
	if err := c.mayStart(uses); err != nil {
		return nil, err
	}
	d := c.describe(context.Background(), uses, true)
	switch {
	case d.err == nil:
	case errors.Is(d.err, fs.ErrNotExist) && !errors.Is(d.err, host.ErrStageNotFound):
		return nil, fmt.Errorf("plugin binary %s not found (the path is relative to the spec file)", uses)
	case errors.Is(d.err, host.ErrStageNotFound) && c.unbuiltSource(uses) != "":
		return nil, c.unbuiltError(uses)
	case errors.Is(d.err, host.ErrStageNotFound):
		return nil, fmt.Errorf("unknown stage %q: no built-in stage has this name (built-in: %s) and no plugin binary %s was found in ./plugins, $MSPIPE_PLUGIN_PATH or the user config dir",
			uses, strings.Join(c.Names(), ", "), plugins.BinaryName(uses))
	default:
		return nil, errors.New(trimUses(d.err.Error(), uses))
	}
	info := &spec.StageInfo{Name: d.desc.Name, ShellCommand: d.resolved.Builtin && slices.Contains(c.shellCommands, d.desc.Name)}
	if len(d.desc.WithSchema) > 0 {
		info.WithSchema = d.desc.WithSchema
	}
	for _, o := range d.desc.Outputs {
		if o.Name == plugins.WildcardOutput {
			continue // open-ended outputs are declared in the spec
		}
		info.Outputs = append(info.Outputs, spec.OutputDecl{Name: o.Name, Type: spec.Type(o.Type), Description: o.Description})
	}
	if info.Name == "" {
		info.Name = uses
	}
	if _, declared := c.declared[uses]; !declared {
		info.Check = c.checker(uses, d.resolved)
	}
	return info, nil
}

// mayStart returns an error wrapping spec.ErrUnchecked when uses names a
// plugin binary the ExecPolicy does not let Stage start. Resolution only
// looks at files; it never runs them. A uses that does not resolve is left
// to describe, which reports why.
func (c *Catalog) mayStart(uses string) error {
	if c.exec == ExecAll {
		return nil
	}
	if _, ok := c.declared[uses]; ok {
		return nil
	}
	res, err := c.resolver.Resolve(uses)
	if err != nil || res.Builtin {
		return nil
	}
	c.mu.Lock()
	pinned := c.pins[uses] != ""
	c.mu.Unlock()
	var why string
	switch {
	case c.exec == ExecPinned && pinned:
		return nil
	case c.exec == ExecPinned:
		why = "it has no sha256 pin"
	default:
		why = "plugin binaries are not started"
	}
	msg := fmt.Sprintf("plugin binary %s was not started to read its declaration: %s", res.Path, why)
	if c.uncheckedNote != "" {
		msg += " (" + c.uncheckedNote + ")"
	}
	return fmt.Errorf("%w: %s", spec.ErrUnchecked, msg)
}

// trimUses drops the `uses "x": ` prefix resolution errors carry: the spec
// error already names the place.
func trimUses(msg, uses string) string {
	return strings.TrimPrefix(msg, fmt.Sprintf("uses %q: ", uses))
}

// Identity implements pipeline.Launcher: the plugin's name, version and
// what it was built from, so rebuilding a plugin (or mspipe, for built-ins)
// from other source invalidates cached outputs. A plugin binary is named by
// its SHA-256; a built-in by the source mspipe was built from (see
// buildSource), so that `go run` and an installed mspipe of the same source
// share a cache, or by mspipe's SHA-256 when that source has no name.
func (c *Catalog) Identity(ctx context.Context, p *spec.Pipeline, s *spec.Stage) (string, error) {
	if _, ok := c.declared[s.Uses]; ok {
		return "", fmt.Errorf("stage %s: %w (it ships as a declaration so specs validate; see the README's status table)", s.Uses, ErrNotImplemented)
	}
	d := c.describe(ctx, s.Uses, false)
	if d.err != nil {
		return "", d.err
	}
	built, err := c.builtFrom(ctx, d.resolved)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s@%s %s", d.desc.Name, d.desc.Version, built), nil
}

// builtFrom names what the executable that would run was built from:
// "sha256:HEX" of a plugin binary, and for the built-ins the source of
// mspipe itself, looked up once per catalog.
func (c *Catalog) builtFrom(ctx context.Context, res host.Resolved) (string, error) {
	if !res.Builtin {
		h, err := fileSHA256(res.Path)
		return "sha256:" + h, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.self == "" {
		info, _ := debug.ReadBuildInfo()
		if src, ok := buildSource(ctx, info, res.Path, builtFromCheckout); ok {
			c.self = "mspipe " + src
		} else {
			h, err := fileSHA256(res.Path)
			if err != nil {
				return "", fmt.Errorf("hash the mspipe binary: %w", err)
			}
			c.self = "sha256:" + h
		}
	}
	return c.self, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Launch implements pipeline.Launcher: the stage's plugin runs in its own
// process (built-ins as `mspipe __stage NAME`), its output going to log. A
// built-in that is Reusable (plugins.Info) may get a process that ran an
// earlier stage of the same kind and is idle (see pool); Close the catalog
// to stop those.
func (c *Catalog) Launch(ctx context.Context, p *spec.Pipeline, s *spec.Stage, log io.Writer) (pipeline.Process, error) {
	if _, ok := c.declared[s.Uses]; ok {
		return nil, fmt.Errorf("stage %s: %w", s.Uses, ErrNotImplemented)
	}
	d := c.describe(ctx, s.Uses, false)
	if d.err != nil {
		return nil, d.err
	}
	cfg := d.resolved.LaunchConfig()
	cfg.SHA256 = s.SHA256
	cfg.Log = log
	cfg.MemoryLimit = s.Limits.Memory
	if d.resolved.Builtin {
		if info, ok := c.registry.Lookup(d.resolved.Name); ok && info.Reusable {
			return c.pool.lease(ctx, cfg, log)
		}
	}
	return host.Launch(ctx, cfg)
}

// Kinds of a [Listing].
const (
	KindBuiltin  = "built-in"
	KindDeclared = "declared" // a built-in that is declared but not implemented yet
	KindBinary   = "binary"   // a plugin binary found along the search path
)

// Listing is one stage the catalog offers, as `mspipe plugins` shows it.
type Listing struct {
	Kind string // one of the Kind* constants
	// Name is the stage name; for a binary that cannot be used, the name
	// its file name implies.
	Name        string
	Version     string
	Description string
	Path        string // a binary's absolute path
	ShadowedBy  string // a binary that resolution picks instead of this one
	Err         error  // why a binary cannot be used
}

// List describes every stage the catalog offers: the built-ins, the
// declared-only built-ins, then every plugin binary along the search path
// (each started once to ask what it is), shadowed ones included.
func (c *Catalog) List(ctx context.Context) []Listing {
	var out []Listing
	for _, name := range c.registry.Names() {
		d := c.describe(ctx, name, false)
		out = append(out, Listing{Kind: KindBuiltin, Name: name, Version: d.desc.Version, Description: d.desc.Description, Err: d.err})
	}
	for _, name := range c.Names() {
		if d, ok := c.declared[name]; ok {
			out = append(out, Listing{Kind: KindDeclared, Name: name, Description: d.Description})
		}
	}
	for _, b := range c.resolver.Binaries() {
		d := c.describe(ctx, b.Path, false)
		l := Listing{Kind: KindBinary, Name: b.Name, Path: b.Path, ShadowedBy: b.ShadowedBy, Err: d.err}
		if d.err == nil {
			l.Name, l.Version, l.Description = d.desc.Name, d.desc.Version, d.desc.Description
		}
		out = append(out, l)
	}
	return out
}
