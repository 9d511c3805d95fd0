package spec

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/expr-lang/expr"
	"github.com/mspipe/mspipe/internal/diag"
	"gopkg.in/yaml.v3"
)

// ErrNotValidated is returned by the resolve functions for a pipeline whose
// expressions Validate has not compiled.
var ErrNotValidated = errors.New("pipeline not validated")

// Resolver evaluates a validated pipeline's templates against run-time values.
type Resolver struct {
	p     *Pipeline
	env   *envType
	infos map[string]*StageInfo // by stage id
}

// NewResolver prepares evaluation for a pipeline Validate accepted with the
// same catalog.
func NewResolver(p *Pipeline, cat Catalog) (*Resolver, error) {
	if p.tooComplex {
		return nil, fmt.Errorf("%s: %w", p.File, ErrTooComplex)
	}
	v := &validator{p: p, cat: cat, infos: map[string]*StageInfo{}, open: map[string]bool{}}
	v.stages()
	outputs := map[string][]OutputDecl{}
	for _, s := range p.Stages {
		outputs[s.ID] = v.outputsOf(s)
	}
	if errs := diag.List(v.errs).Err(); errs != nil {
		return nil, errs
	}
	return &Resolver{p: p, env: buildEnvType(p, outputs, v.open), infos: v.infos}, nil
}

// Eval evaluates a template: a whole template yields the expression's value,
// any other the formatted string.
func (r *Resolver) Eval(t *Template, sc *Scope) (any, error) {
	env, err := r.env.value(sc)
	if err != nil {
		return nil, err
	}
	return evalTemplate(t, env)
}

func evalTemplate(t *Template, env any) (any, error) {
	if t.Whole() {
		for _, p := range t.Parts {
			if p.Expr != "" {
				return run(p, t, env)
			}
		}
	}
	var out []byte
	for _, p := range t.Parts {
		if p.Expr == "" {
			out = append(out, p.Literal...)
			continue
		}
		v, err := run(p, t, env)
		if err != nil {
			return nil, err
		}
		out = append(out, formatValue(v)...)
	}
	return string(out), nil
}

func run(p TemplatePart, t *Template, env any) (any, error) {
	if p.program == nil {
		return nil, fmt.Errorf("%s: %w", t.what, ErrNotValidated)
	}
	v, err := expr.Run(p.program, env)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: evaluate %q: %w", p.Pos, t.what, p.Expr, err)
	}
	return v, nil
}

// With resolves a stage's inputs to plain data (JSON-compatible), each
// `${{ }}` replaced by its value. Check the result against the stage's
// schema, then pass it through ShellData before the stage runs.
func (r *Resolver) With(s *Stage, sc *Scope) (map[string]any, error) {
	with, err := r.with(s, sc)
	if err != nil {
		return nil, err
	}
	if dataSize(with, MaxExpandedSize) > MaxExpandedSize {
		return nil, fmt.Errorf("stages.%s.with: resolves to more than %d bytes of values (the limit for a spec)", s.ID, MaxExpandedSize)
	}
	return with, nil
}

// dataSize adds up the length of the strings (keys included) of resolved
// data, counting other scalars as 8 bytes, and stops once past limit.
func dataSize(v any, limit int) int {
	size := 0
	var walk func(v any)
	walk = func(v any) {
		if size > limit {
			return
		}
		switch v := v.(type) {
		case string:
			size += len(v)
		case map[string]any:
			for k, e := range v {
				size += len(k)
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		default:
			size += 8
		}
	}
	walk(v)
	return size
}

// ShellData prepares a stage's resolved inputs (With's result) to run: for
// a stage whose catalog entry has ShellCommand, the expressions in a
// command the shell will run become quoted references to $MSPIPE_EXPR_n
// variables, which are added to with.env, so their values reach the
// command as data, never as shell syntax. Other stages' inputs are
// returned as they are. It runs after the schema check, which must see
// the values themselves (an empty command is an error, not "$MSPIPE_EXPR_1").
func (r *Resolver) ShellData(s *Stage, sc *Scope, with map[string]any) (map[string]any, error) {
	if !r.shellCommand(s) {
		return with, nil
	}
	return r.shellWith(s, sc, with)
}

func (r *Resolver) shellCommand(s *Stage) bool {
	info := r.infos[s.ID]
	return info != nil && info.ShellCommand
}

// shellWith rewrites with.command of a shell-command stage (see With).
func (r *Resolver) shellWith(s *Stage, sc *Scope, with map[string]any) (map[string]any, error) {
	cmdNode := mappingValue(s.With, "command")
	if cmdNode == nil {
		return with, nil
	}
	// The exec stage's rule: a string runs through the shell unless
	// shell: false, a list only with shell: true.
	shell, isBool := with["shell"].(bool)
	if !isBool {
		shell = cmdNode.Kind == yaml.ScalarNode
	}
	if !shell {
		return with, nil
	}
	env, err := r.env.value(sc)
	if err != nil {
		return nil, err
	}
	byNode := map[*yaml.Node]*Template{}
	for _, t := range s.Templates {
		byNode[t.Node()] = t
	}
	next := 0
	vars := map[string]string{}
	script := func(n *yaml.Node, resolved any) (any, error) {
		t, ok := byNode[n]
		if !ok {
			return resolved, nil
		}
		var values []any
		for _, p := range t.Parts {
			if p.Expr == "" {
				continue
			}
			v, err := run(p, t, env)
			if err != nil {
				return nil, err
			}
			values = append(values, v)
		}
		text, refs, rerr := shellRefs(t, values, &next)
		if rerr != nil {
			return nil, fmt.Errorf("%s: stages.%s.with.command: %w", rerr.Pos, s.ID, rerr)
		}
		for k, v := range refs {
			vars[k] = v
		}
		return text, nil
	}
	switch cmdNode.Kind {
	case yaml.ScalarNode:
		v, err := script(cmdNode, with["command"])
		if err != nil {
			return nil, err
		}
		with["command"] = v
	case yaml.SequenceNode:
		list, _ := with["command"].([]any)
		for i, item := range cmdNode.Content {
			if i >= len(list) {
				break
			}
			v, err := script(item, list[i])
			if err != nil {
				return nil, err
			}
			list[i] = v
		}
	}
	if len(vars) == 0 {
		return with, nil
	}
	merged := map[string]any{}
	if user, ok := with["env"].(map[string]any); ok {
		for k, v := range user {
			merged[k] = v
		}
	}
	for k, v := range vars {
		if _, taken := merged[k]; taken {
			return nil, fmt.Errorf("%s: stages.%s.with.env.%s: the name is reserved for expression values in the command", s.Pos, s.ID, k)
		}
		merged[k] = v
	}
	with["env"] = merged
	return with, nil
}

// mappingValue returns the value node of key in a mapping node (aliases
// followed), or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			for v != nil && v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}

func (r *Resolver) with(s *Stage, sc *Scope) (map[string]any, error) {
	if s.With == nil {
		return map[string]any{}, nil
	}
	env, err := r.env.value(sc)
	if err != nil {
		return nil, err
	}
	byNode := map[*yaml.Node]*Template{}
	for _, t := range s.Templates {
		byNode[t.Node()] = t
	}
	var conv func(n *yaml.Node, depth int) (any, error)
	conv = func(n *yaml.Node, depth int) (any, error) {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil || depth > maxDepth {
			return nil, fmt.Errorf("stages.%s.with: nested too deep", s.ID)
		}
		switch n.Kind {
		case yaml.MappingNode:
			m := make(map[string]any, len(n.Content)/2)
			for i := 0; i+1 < len(n.Content); i += 2 {
				v, err := conv(n.Content[i+1], depth+1)
				if err != nil {
					return nil, err
				}
				m[n.Content[i].Value] = v
			}
			return m, nil
		case yaml.SequenceNode:
			l := make([]any, len(n.Content))
			for i, c := range n.Content {
				v, err := conv(c, depth+1)
				if err != nil {
					return nil, err
				}
				l[i] = v
			}
			return l, nil
		}
		if t, ok := byNode[n]; ok {
			return evalTemplate(t, env)
		}
		return scalarValue(n)
	}
	v, err := conv(s.With, 0)
	if err != nil {
		return nil, err
	}
	m, _ := v.(map[string]any)
	return m, nil
}

// If evaluates a stage's condition; a stage without one always runs.
func (r *Resolver) If(s *Stage, sc *Scope) (bool, error) {
	if s.If == nil {
		return true, nil
	}
	v, err := r.Eval(s.If, sc)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s: stages.%s.if: evaluated to %v, not a boolean", s.If.Pos, s.ID, v)
	}
	return b, nil
}

// Devices resolves a cluster's device count (a number or an expression).
func (r *Resolver) Devices(c *Cluster, sc *Scope) (int, error) {
	if c.DevicesExpr == nil {
		return c.Devices, nil
	}
	v, err := r.Eval(c.DevicesExpr, sc)
	if err != nil {
		return 0, err
	}
	n, err := ConvertValue(v, TypeInt)
	if err != nil {
		return 0, fmt.Errorf("%s: cluster.devices: %v is not an integer", c.DevicesPos, v)
	}
	if err := CheckDeviceCount(n.(int)); err != nil {
		return 0, fmt.Errorf("%s: cluster.devices: %w", c.DevicesPos, err)
	}
	return n.(int), nil
}

// ParseParam converts a `-p name=value` string to the param's type: a
// number for int and float, true/false for bool, YAML for list and map.
func ParseParam(p *Param, raw string) (any, error) {
	switch p.Type {
	case TypeString, TypePath:
		return raw, nil
	case TypeInt:
		n, err := strconv.Atoi(raw)
		if err != nil {
			return nil, fmt.Errorf("param %s: %q is not an integer", p.Name, raw)
		}
		return n, nil
	case TypeFloat:
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return nil, fmt.Errorf("param %s: %q is not a number", p.Name, raw)
		}
		return f, nil
	case TypeBool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return nil, fmt.Errorf("param %s: %q is not true or false", p.Name, raw)
		}
		return b, nil
	}
	var v any
	if err := yaml.Unmarshal([]byte(raw), &v); err != nil {
		return nil, fmt.Errorf("param %s: %q is not valid YAML: %w", p.Name, raw, err)
	}
	out, err := ConvertValue(v, p.Type)
	if err != nil {
		return nil, fmt.Errorf("param %s: %w", p.Name, err)
	}
	return out, nil
}
