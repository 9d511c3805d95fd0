package cli

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
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mspipe/mspipe/pipeline"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/spec"
	ckptintegrate "github.com/mspipe/mspipe/stages/ckpt/integrate"
	ckptreshard "github.com/mspipe/mspipe/stages/ckpt/reshard"
	execstage "github.com/mspipe/mspipe/stages/exec"
)

// declaredStages are built-in stages whose declaration ships with this
// build although their implementation has not landed yet: specs using them
// validate, and running them fails with ErrNotImplemented.
var declaredStages = [][]byte{
	ckptintegrate.Descriptor,
	ckptreshard.Descriptor,
}

// errNotImplemented is returned when running a declared-only stage.
var errNotImplemented = errors.New("declared but not implemented in this build")

// declaredDescriptor is the JSON form of a stage declaration.
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

// stageEnv knows every stage a spec can use — built-ins served by this
// binary, declared-only built-ins, and plugin binaries found by discovery —
// and is both the spec.Catalog for validation and the pipeline.Launcher.
type stageEnv struct {
	registry *plugins.Registry
	resolver *plugins.Resolver
	declared map[string]plugins.Descriptor

	mu        sync.Mutex
	described map[string]describedStage // by uses
	pins      map[string]string         // uses -> sha256 pin from the spec
	selfHash  string
}

type describedStage struct {
	desc     plugins.Descriptor
	resolved plugins.Resolved
	err      error
}

var (
	_ spec.Catalog      = (*stageEnv)(nil)
	_ pipeline.Launcher = (*stageEnv)(nil)
)

// newStageEnv builds the stage environment for specs in specDir.
func newStageEnv(specDir string) (*stageEnv, error) {
	reg, err := builtinStages()
	if err != nil {
		return nil, err
	}
	env := &stageEnv{
		registry:  reg,
		resolver:  &plugins.Resolver{Builtins: reg, SpecDir: specDir, SearchPath: plugins.DefaultSearchPath()},
		declared:  map[string]plugins.Descriptor{},
		described: map[string]describedStage{},
		pins:      map[string]string{},
	}
	for _, raw := range declaredStages {
		var d declaredDescriptor
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("built-in stage declaration: %w", err)
		}
		if _, ok := reg.Lookup(d.Name); !ok {
			env.declared[d.Name] = d.descriptor()
		}
	}
	return env, nil
}

// usePins makes describe check the sha256 pins a spec sets, so a binary
// that does not match is not even started to ask what it declares.
func (e *stageEnv) usePins(p *spec.Pipeline) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range p.Stages {
		if s.SHA256 != "" {
			e.pins[s.Uses] = s.SHA256
		}
	}
}

// Names lists the built-in and declared stage names.
func (e *stageEnv) Names() []string {
	names := e.registry.Names()
	for n := range e.declared {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// describeTimeout bounds starting a plugin binary to ask what it declares.
const describeTimeout = 10 * time.Second

// describe returns what the stage named by uses declares, starting its
// plugin binary if it is not a built-in. Results are memoized.
func (e *stageEnv) describe(ctx context.Context, uses string) describedStage {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.described[uses]; ok {
		return d
	}
	d := e.describeLocked(ctx, uses)
	e.described[uses] = d
	return d
}

func (e *stageEnv) describeLocked(ctx context.Context, uses string) describedStage {
	if desc, ok := e.declared[uses]; ok {
		return describedStage{desc: desc}
	}
	res, err := e.resolver.Resolve(uses)
	if err != nil {
		return describedStage{err: err}
	}
	if res.Builtin {
		info, _ := e.registry.Lookup(res.Name)
		desc, err := info.New().Describe(ctx)
		return describedStage{desc: desc, resolved: res, err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	cfg := res.LaunchConfig()
	cfg.SHA256 = e.pins[uses]
	client, err := plugins.Launch(ctx, cfg)
	if err != nil {
		return describedStage{resolved: res, err: err}
	}
	defer client.Close()
	desc, err := client.Describe(ctx)
	return describedStage{desc: desc, resolved: res, err: err}
}

// Stage implements spec.Catalog.
func (e *stageEnv) Stage(uses string) (*spec.StageInfo, error) {
	d := e.describe(context.Background(), uses)
	switch {
	case d.err == nil:
	case errors.Is(d.err, fs.ErrNotExist) && !errors.Is(d.err, plugins.ErrStageNotFound):
		return nil, fmt.Errorf("plugin binary %s not found (the path is relative to the spec file)", uses)
	case errors.Is(d.err, plugins.ErrStageNotFound):
		return nil, fmt.Errorf("unknown stage %q: no built-in stage has this name (built-in: %s) and no plugin binary %s was found in ./plugins, $MSPIPE_PLUGIN_PATH or the user config dir",
			uses, strings.Join(e.Names(), ", "), plugins.BinaryName(uses))
	default:
		return nil, errors.New(trimUses(d.err.Error(), uses))
	}
	info := &spec.StageInfo{Name: d.desc.Name, ShellCommand: d.resolved.Builtin && d.desc.Name == execstage.Name}
	if len(d.desc.WithSchema) > 0 {
		info.WithSchema = d.desc.WithSchema
	}
	for _, o := range d.desc.Outputs {
		if o.Name == "*" {
			continue // open-ended outputs are declared in the spec
		}
		info.Outputs = append(info.Outputs, spec.OutputDecl{Name: o.Name, Type: spec.Type(o.Type), Description: o.Description})
	}
	if info.Name == "" {
		info.Name = uses
	}
	return info, nil
}

// trimUses drops the `uses "x": ` prefix plugins errors carry: the spec
// error already names the place.
func trimUses(msg, uses string) string {
	return strings.TrimPrefix(msg, fmt.Sprintf("uses %q: ", uses))
}

// Identity implements pipeline.Launcher: the plugin's name, version and the
// SHA-256 of the executable that would run, so rebuilding a plugin (or
// mspipe, for built-ins) invalidates cached outputs.
func (e *stageEnv) Identity(ctx context.Context, p *spec.Pipeline, s *spec.Stage) (string, error) {
	if _, ok := e.declared[s.Uses]; ok {
		return "", fmt.Errorf("stage %s: %w (it ships as a declaration so specs validate; see the README's status table)", s.Uses, errNotImplemented)
	}
	d := e.describe(ctx, s.Uses)
	if d.err != nil {
		return "", d.err
	}
	digest, err := e.executableDigest(d.resolved)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s@%s sha256:%s", d.desc.Name, d.desc.Version, digest), nil
}

func (e *stageEnv) executableDigest(res plugins.Resolved) (string, error) {
	if res.Builtin {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.selfHash == "" {
			h, err := fileSHA256(res.Path)
			if err != nil {
				return "", fmt.Errorf("hash the mspipe binary: %w", err)
			}
			e.selfHash = h
		}
		return e.selfHash, nil
	}
	return fileSHA256(res.Path)
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
// process (built-ins as `mspipe __stage NAME`), its output going to log.
func (e *stageEnv) Launch(ctx context.Context, p *spec.Pipeline, s *spec.Stage, log io.Writer) (pipeline.Process, error) {
	if _, ok := e.declared[s.Uses]; ok {
		return nil, fmt.Errorf("stage %s: %w", s.Uses, errNotImplemented)
	}
	d := e.describe(ctx, s.Uses)
	if d.err != nil {
		return nil, d.err
	}
	cfg := d.resolved.LaunchConfig()
	cfg.SHA256 = s.SHA256
	cfg.Log = log
	return plugins.Launch(ctx, cfg)
}
