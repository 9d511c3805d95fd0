package spec

import (
	"context"
	"sort"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
	"gopkg.in/yaml.v3"
)

// CheckRequest is what a stage's own check (StageInfo.Check) gets: what is
// known of the stage before the pipeline runs.
type CheckRequest struct {
	// With holds the static values of the stage's `with` block and the
	// `${{ }}` values that need only params and cluster, resolved.
	With map[string]any
	// Devices is the stage's device count, 0 when only the run knows it
	// (an expression of run-time values, or a rank table not read).
	Devices int
	// RankTable is the path of the stage's rank table joined with the
	// spec's directory, "" when it has none.
	RankTable string
	// Unknown lists, sorted, the top-level keys of `with` whose values need
	// other stages' outputs or run data; they are not in With.
	Unknown []string
}

// CheckProblem is one problem a stage's own check found.
type CheckProblem struct {
	// Path is a JSON pointer (RFC 6901) into the `with` block, "" for the
	// whole block.
	Path    string
	Message string
}

// stageChecks asks every stage whose `with` fits its schema to check it
// itself, with the stage's cluster, and reports each problem at the place
// in the spec its path points to.
func (v *validator) stageChecks() {
	for _, s := range v.p.Stages {
		info := v.infos[s.ID]
		if info == nil || info.Check == nil || v.open[s.ID] || v.schemaFailed[s.ID] {
			continue
		}
		sc := v.staticScope(s)
		with, unknown := v.staticWith(s, sc)
		req := CheckRequest{With: with, Unknown: unknown, Devices: sc.Cluster.Devices, RankTable: sc.Cluster.RankTable}
		problems, err := info.Check(context.Background(), req)
		if err != nil {
			v.errs.warn(s.UsesPos, "stages.%s.uses: stage %s could not check its with: %v", s.ID, info.Name, err)
			continue
		}
		for _, pr := range problems {
			pos, place := withPlace(v.p.File, s, pointerTokens(pr.Path))
			v.errs.add(pos, "%s: %s", place, pr.Message)
		}
	}
}

// pointerTokens splits a JSON pointer into its unescaped tokens; "" (the
// whole document) has none.
func pointerTokens(ptr string) []string {
	if ptr == "" {
		return nil
	}
	toks := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// staticScope is what expressions of stage s can see before the run:
// params with their command-line values or defaults, and the stage's
// cluster when its size does not depend on the run. Scope fields left
// unset are unknown; staticKnown says which names a template may read.
func (v *validator) staticScope(s *Stage) *staticScopeValue {
	sc := &staticScopeValue{Scope: Scope{Params: map[string]any{}}}
	for _, prm := range v.p.Params {
		if val, ok := v.opts.Params[prm.Name]; ok {
			sc.Params[prm.Name] = val
		} else if prm.Default != nil {
			sc.Params[prm.Name] = prm.Default
		}
	}
	c := v.p.EffectiveCluster(s)
	sc.Cluster.RankTable = v.p.Resolve(c.RankTable)
	switch {
	case c.RankTable != "":
		// The run takes the devices from the table; its hosts are not read here.
		sc.Cluster.Devices = v.tableDevices[c]
		sc.hostsUnknown = true
	case c.DevicesExpr != nil:
		if n, ok := v.staticDevices(c, sc); ok {
			sc.Cluster.Devices = n
		}
	default:
		sc.Cluster.Devices = c.Devices
	}
	if sc.Cluster.Devices <= 0 {
		sc.Cluster.Devices = 0
		sc.hostsUnknown = true
	} else if c.RankTable == "" {
		// As the engine counts them: 8 devices a host.
		sc.Cluster.Hosts = max(1, sc.Cluster.Devices/8)
	}
	return sc
}

// staticScopeValue is a Scope with what is known of it before the run.
type staticScopeValue struct {
	Scope
	hostsUnknown bool // cluster.hosts: the rank table's, or of unknown devices
}

// staticDevices evaluates a devices expression that reads only params.
func (v *validator) staticDevices(c *Cluster, sc *staticScopeValue) (int, bool) {
	pipelineLevel := &staticScopeValue{Scope: Scope{Params: sc.Params}, hostsUnknown: true}
	val, ok := v.staticEval(c.DevicesExpr, pipelineLevel)
	if !ok {
		return 0, false
	}
	n, err := ConvertValue(val, TypeInt)
	if err != nil || CheckDeviceCount(n.(int)) != nil {
		return 0, false
	}
	return n.(int), true
}

// staticEval evaluates t if it reads only what sc knows; ok is false when
// it reads something else or fails (the run will say why).
func (v *validator) staticEval(t *Template, sc *staticScopeValue) (any, bool) {
	if v.env == nil || !staticKnown(t, sc) {
		return nil, false
	}
	env, err := v.env.value(&sc.Scope)
	if err != nil {
		return nil, false
	}
	val, err := evalTemplate(t, env)
	if err != nil {
		return nil, false
	}
	return val, true
}

// staticKnown reports whether every expression of t reads only params that
// have a value and cluster fields that sc knows. Any other root name
// (stages, env, run), or a computed access to params or cluster, makes it
// known only at run time.
func staticKnown(t *Template, sc *staticScopeValue) bool {
	for _, part := range t.Parts {
		if part.Expr == "" {
			continue
		}
		if part.program == nil {
			return false // did not compile: reported already
		}
		tree, err := parser.Parse(part.Expr)
		if err != nil {
			return false
		}
		if !treeKnown(tree, sc) {
			return false
		}
	}
	return true
}

func treeKnown(tree *parser.Tree, sc *staticScopeValue) bool {
	var members []*ast.MemberNode
	inner := map[ast.Node]bool{}
	var idents []*ast.IdentifierNode
	ast.Walk(&tree.Node, visitFunc(func(n *ast.Node) {
		switch x := (*n).(type) {
		case *ast.MemberNode:
			members = append(members, x)
			inner[x.Node] = true
		case *ast.IdentifierNode:
			idents = append(idents, x)
		}
	}))
	allowed := map[*ast.IdentifierNode]bool{}
	for _, m := range members {
		if inner[m] {
			continue
		}
		root, props, _ := memberChain(m)
		if root == "" || len(props) == 0 || !chainKnown(root, props[0], sc) {
			continue
		}
		allowed[chainRoot(m)] = true
	}
	for _, id := range idents {
		if isStatusFunc(id.Value) || isRootName(id.Value) && !allowed[id] {
			return false
		}
	}
	return true
}

// chainKnown says whether root.prop has a value before the run.
func chainKnown(root, prop string, sc *staticScopeValue) bool {
	switch root {
	case "params":
		_, ok := sc.Params[prop]
		return ok
	case "cluster":
		switch prop {
		case "devices":
			return sc.Cluster.Devices > 0
		case "hosts":
			return !sc.hostsUnknown
		case "rank_table":
			return true
		}
	}
	return false
}

// chainRoot returns the identifier a member chain starts from.
func chainRoot(m *ast.MemberNode) *ast.IdentifierNode {
	var n ast.Node = m
	for {
		switch x := n.(type) {
		case *ast.MemberNode:
			n = x.Node
		case *ast.IdentifierNode:
			return x
		default:
			return nil
		}
	}
}

func isRootName(name string) bool {
	for _, r := range rootNames {
		if r == name {
			return true
		}
	}
	return false
}

// staticWith converts a stage's `with` to plain data as far as it is known
// before the run: a top-level key whose value holds a template that needs
// run-time values is left out and listed in unknown.
func (v *validator) staticWith(s *Stage, sc *staticScopeValue) (map[string]any, []string) {
	with := map[string]any{}
	root := s.With
	for root != nil && root.Kind == yaml.AliasNode {
		root = root.Alias
	}
	if root == nil || root.Kind != yaml.MappingNode {
		return with, nil
	}
	byNode := map[*yaml.Node]*Template{}
	for _, t := range s.Templates {
		byNode[t.Node()] = t
	}
	var conv func(n *yaml.Node, depth int) (any, bool)
	conv = func(n *yaml.Node, depth int) (any, bool) {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil || depth > maxDepth {
			return nil, false
		}
		switch n.Kind {
		case yaml.MappingNode:
			m := make(map[string]any, len(n.Content)/2)
			for i := 0; i+1 < len(n.Content); i += 2 {
				val, ok := conv(n.Content[i+1], depth+1)
				if !ok {
					return nil, false
				}
				m[n.Content[i].Value] = val
			}
			return m, true
		case yaml.SequenceNode:
			l := make([]any, len(n.Content))
			for i, c := range n.Content {
				val, ok := conv(c, depth+1)
				if !ok {
					return nil, false
				}
				l[i] = val
			}
			return l, true
		}
		if t, ok := byNode[n]; ok {
			return v.staticEval(t, sc)
		}
		if s.badTemplates[n] {
			return nil, false
		}
		val, err := scalarValue(n)
		return val, err == nil
	}
	var unknown []string
	for i := 0; i+1 < len(root.Content); i += 2 {
		key := root.Content[i].Value
		if val, ok := conv(root.Content[i+1], 1); ok {
			with[key] = val
		} else {
			unknown = append(unknown, key)
		}
	}
	sort.Strings(unknown)
	// As the run will give them: relative path inputs against the spec's directory.
	absPaths(with, PathInputs(v.infos[s.ID]), v.p.BaseDir)
	return with, unknown
}
