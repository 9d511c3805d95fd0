package spec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/mspipe/mspipe/internal/diag"
	"gopkg.in/yaml.v3"
)

// Catalog tells the validator which stages exist and what they declare.
type Catalog interface {
	// Stage returns what the stage named by a `uses` value declares. The
	// error explains why it cannot be used (unknown name, missing binary);
	// one wrapping ErrUnchecked says only that its declaration is unknown.
	Stage(uses string) (*StageInfo, error)
	// Names lists the stage names the catalog knows, for suggestions.
	Names() []string
}

// StageInfo is what a stage plugin declares about itself.
type StageInfo struct {
	Name       string
	WithSchema []byte       // JSON Schema of `with`; nil accepts anything
	Outputs    []OutputDecl // typed outputs
	// ShellCommand marks the exec stage's rule: with.command runs through
	// /bin/sh (a string unless with.shell is false, a list when it is true),
	// so Resolver.With passes expression values in it as environment
	// variables (with.env) instead of pasting them into the script.
	ShellCommand bool
	// Check, if set, asks the stage itself to check a `with` block (its
	// plugin's Validate), for what a schema cannot say. Validate calls it
	// for every stage whose `with` fits the schema. The error is for a
	// failure to check at all; Validate reports it as a warning.
	Check func(ctx context.Context, req CheckRequest) ([]CheckProblem, error)
}

// Options tune Validate.
type Options struct {
	// CheckRankTable validates a rank table file named in a cluster (path
	// already joined with the spec's directory) and returns its number of
	// devices; problems are returned as errors positioned in that file.
	// Nil skips the check.
	CheckRankTable func(path string) (devices int, problems diag.List, err error)
	// Params are param values given on the command line; they take the
	// place of defaults when a stage's own check (StageInfo.Check) gets
	// the `${{ params.* }}` values of its `with` block.
	Params map[string]any
	// Env is the environment `${{ env.NAME }}` falls back to after the
	// spec's own env (usually the process environment). Reading a name
	// set in neither is a warning; nil skips that check.
	Env map[string]string
}

// Validate runs the semantic checks on a decoded pipeline: stage names,
// needs and cycles, expressions (names, types, visibility through needs),
// each stage's `with` against its schema, rank tables, and each stage's own
// checks (StageInfo.Check) with its cluster. It compiles every
// template, so Resolve can be used afterwards.
func Validate(p *Pipeline, cat Catalog, opts Options) diag.List {
	if p.tooComplex {
		return nil // Parse reported it; walking aliases again could take exponential time
	}
	v := &validator{p: p, cat: cat, opts: opts, infos: map[string]*StageInfo{}, open: map[string]bool{},
		schemaFailed: map[string]bool{}, tableDevices: map[*Cluster]int{}}
	v.stages()
	v.graph()
	v.expressions()
	v.withSchemas()
	v.shellCommands()
	v.clusters()
	v.stageChecks()
	errs := diag.List(v.errs)
	errs.Sort()
	return errs
}

type validator struct {
	p     *Pipeline
	cat   Catalog
	opts  Options
	errs  problems
	infos map[string]*StageInfo // by stage id
	byID  map[string]*Stage     // the first stage of each id
	env   *envType
	open  map[string]bool // stages whose plugin could not be described
	// schemaFailed marks the stages whose `with` does not fit the schema:
	// their own check is not asked.
	schemaFailed map[string]bool
	// tableDevices is the device count of each cluster's valid rank table.
	tableDevices map[*Cluster]int
}

func (v *validator) stages() {
	seen := map[string]bool{}
	for _, s := range v.p.Stages {
		if seen[s.ID] {
			v.errs.add(s.Pos, "stages: duplicate stage id %q", s.ID)
		}
		seen[s.ID] = true
		if s.Uses == "" || v.cat == nil {
			continue
		}
		info, err := v.cat.Stage(s.Uses)
		if errors.Is(err, ErrUnchecked) {
			v.errs.warn(s.UsesPos, "stages.%s.uses: %v", s.ID, err)
			v.open[s.ID] = true
			continue
		}
		if err != nil {
			msg := err.Error()
			if !strings.Contains(s.Uses, "/") || !strings.HasPrefix(s.Uses, ".") {
				msg += diag.Suggest(s.Uses, v.cat.Names())
			}
			v.errs.add(s.UsesPos, "stages.%s.uses: %s", s.ID, msg)
			v.open[s.ID] = true
			continue
		}
		v.infos[s.ID] = info
	}
}

// graph checks needs: unknown stages and cycles.
func (v *validator) graph() {
	ids := make([]string, 0, len(v.p.Stages))
	v.byID = make(map[string]*Stage, len(v.p.Stages))
	for _, s := range v.p.Stages {
		ids = append(ids, s.ID)
		if v.byID[s.ID] == nil {
			v.byID[s.ID] = s
		}
	}
	for _, s := range v.p.Stages {
		for _, n := range s.Needs {
			switch {
			case n == s.ID:
				v.errs.add(s.NeedsPos[n], "stages.%s.needs: a stage cannot need itself", s.ID)
			case v.byID[n] == nil:
				v.errs.add(s.NeedsPos[n], "stages.%s.needs: unknown stage %q%s", s.ID, n, diag.Suggest(n, ids))
			}
		}
	}
	// Depth-first search with colours; a grey stage reached again closes a cycle.
	const (
		white = iota
		grey
		black
	)
	colour := map[string]int{}
	var path []string
	reported := false
	var visit func(id string)
	visit = func(id string) {
		colour[id] = grey
		path = append(path, id)
		s := v.byID[id]
		for _, n := range s.Needs {
			if v.byID[n] == nil || n == id {
				continue
			}
			switch colour[n] {
			case white:
				visit(n)
			case grey:
				if !reported {
					start := 0
					for i, x := range path {
						if x == n {
							start = i
						}
					}
					cycle := append(append([]string{}, path[start:]...), n)
					v.errs.add(s.NeedsPos[n], "stages: needs form a cycle: %s", strings.Join(cycle, " -> "))
					reported = true
				}
			}
		}
		path = path[:len(path)-1]
		colour[id] = black
	}
	for _, id := range ids {
		if colour[id] == white {
			visit(id)
		}
	}
}

// needs reports whether stage from depends on stage id through its needs,
// directly or transitively. It searches the graph on demand instead of
// keeping every stage's closure: closures of a chain of n stages hold n²/2
// entries (a 7,000-stage chain took 1.3 GB), while most expressions read
// a stage that is needed directly, found at the first step.
func (v *validator) needs(from *Stage, id string) bool {
	for _, n := range from.Needs {
		if n == id {
			return true
		}
	}
	seen := map[string]bool{from.ID: true}
	stack := []*Stage{from}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, n := range s.Needs {
			if n == id {
				return true
			}
			if next := v.byID[n]; next != nil && !seen[n] {
				seen[n] = true
				stack = append(stack, next)
			}
		}
	}
	return false
}

// outputsOf merges what the plugin declares with what the spec declares.
func (v *validator) outputsOf(s *Stage) []OutputDecl {
	var out []OutputDecl
	byName := map[string]OutputDecl{}
	if info := v.infos[s.ID]; info != nil {
		for _, o := range info.Outputs {
			out = append(out, o)
			byName[o.Name] = o
		}
	}
	for _, o := range s.Outputs {
		if prev, ok := byName[o.Name]; ok {
			if prev.Type != o.Type && o.Type != TypeAny {
				v.errs.add(o.Pos, "stages.%s.outputs.%s: stage %s declares this output as %s, not %s", s.ID, o.Name, s.Uses, prev.Type, o.Type)
			}
			continue
		}
		out = append(out, o)
		byName[o.Name] = o
	}
	return out
}

func (v *validator) expressions() {
	outputs := map[string][]OutputDecl{}
	for _, s := range v.p.Stages {
		outputs[s.ID] = v.outputsOf(s)
	}
	v.env = buildEnvType(v.p, outputs, v.open)
	if c := v.p.Cluster; c != nil && c.DevicesExpr != nil {
		v.compile(c.DevicesExpr, nil, "int")
	}
	for _, s := range v.p.Stages {
		if s.Cluster != nil && s.Cluster.DevicesExpr != nil {
			v.compile(s.Cluster.DevicesExpr, s, "int")
		}
		if s.If != nil {
			v.compile(s.If, s, "bool")
		}
		for _, t := range s.Templates {
			v.compile(t, s, "")
		}
	}
}

// compile checks and compiles every expression of t as seen from stage s
// (nil: pipeline level, where no stage outputs are visible). want is the
// required type of a whole-template value ("bool", "int") or "".
func (v *validator) compile(t *Template, s *Stage, want string) {
	for i := range t.Parts {
		part := &t.Parts[i]
		if part.Expr == "" {
			continue
		}
		tree, err := parser.Parse(part.Expr)
		if err != nil {
			v.exprError(t, part, err)
			continue
		}
		if !v.checkNames(t, part, tree, s) {
			continue
		}
		if name, at := statusCall(tree); name != "" && (s == nil || t != s.If) {
			v.errs.add(part.at(at), "%s: %s() is a condition on the outcome of the stages this one needs: use it in the stage's if", t.what, name)
			continue
		}
		opts := []expr.Option{v.env.compileEnv()}
		switch {
		case want == "bool" && t.Whole():
			opts = append(opts, expr.AsBool())
		case want == "int" && t.Whole():
			opts = append(opts, expr.AsInt())
		}
		prog, err := expr.Compile(part.Expr, opts...)
		if err != nil {
			v.exprError(t, part, err)
			continue
		}
		part.program = prog
		part.typ = "any"
		if typ := prog.Node().Type(); typ != nil {
			part.typ = typ.String()
		}
		if want != "" && !t.Whole() {
			v.errs.add(t.Pos, "%s: must be a single expression \"${{ ... }}\" of type %s", t.what, want)
		}
	}
}

var exprTypeRe = strings.NewReplacer("interface {}", "any")

func (v *validator) exprError(t *Template, part *TemplatePart, err error) {
	var fe *file.Error
	pos := part.Pos
	msg := err.Error()
	if errors.As(err, &fe) {
		msg = fe.Message
		pos = part.at(fe.From)
	}
	switch {
	case strings.HasPrefix(msg, "expected bool, but got "):
		msg = "the condition must be a boolean expression, but it is " + exprTypeRe.Replace(strings.TrimPrefix(msg, "expected bool, but got "))
	case strings.HasPrefix(msg, "expected int, but got "):
		msg = "expected an integer expression, but it is " + exprTypeRe.Replace(strings.TrimPrefix(msg, "expected int, but got "))
	case strings.HasPrefix(msg, "unknown name "):
		name := strings.TrimPrefix(msg, "unknown name ")
		msg = fmt.Sprintf("unknown name %q: expressions see %s%s", name, quoteList(rootNames), diag.Suggest(name, rootNames))
	}
	v.errs.add(pos, "%s: %s", t.what, msg)
}

// checkNames reports member accesses on params, cluster, run and stages
// that name nothing, and stage outputs read without needing the stage.
func (v *validator) checkNames(t *Template, part *TemplatePart, tree *parser.Tree, s *Stage) bool {
	var members []*ast.MemberNode
	inner := map[ast.Node]bool{}
	ast.Walk(&tree.Node, visitFunc(func(n *ast.Node) {
		if m, ok := (*n).(*ast.MemberNode); ok {
			members = append(members, m)
			inner[m.Node] = true
		}
	}))
	ok := true
	for _, m := range members {
		if inner[m] {
			continue
		}
		root, props, locs := memberChain(m)
		if root == "" || len(props) == 0 {
			continue
		}
		fail := func(i int, format string, args ...any) {
			v.errs.add(part.at(locs[i]), "%s: %s", t.what, fmt.Sprintf(format, args...))
			ok = false
		}
		switch root {
		case "params":
			if _, found := v.env.params.index[props[0]]; !found {
				fail(0, "unknown param %q%s", props[0], diag.Suggest(props[0], sortedKeys(v.env.params.index)))
			}
		case "cluster":
			if _, found := clusterFields.index[props[0]]; !found {
				fail(0, "cluster has no %q (it has devices, hosts and rank_table)%s", props[0], diag.Suggest(props[0], sortedKeys(clusterFields.index)))
			}
		case "env":
			v.checkEnvName(t, part.at(locs[0]), s, props[0])
		case "run":
			if _, found := runFields.index[props[0]]; !found {
				fail(0, "run has no %q (it has id, name and dir)%s", props[0], diag.Suggest(props[0], sortedKeys(runFields.index)))
			}
		case "stages":
			id := props[0]
			if v.byID[id] == nil {
				fail(0, "unknown stage %q%s", id, diag.Suggest(id, sortedKeys(v.env.stages.index)))
				continue
			}
			switch {
			case s == nil:
				fail(0, "stage outputs are not available here: this value is resolved before any stage runs")
				continue
			case id == s.ID:
				fail(0, "stage %q cannot read its own outputs", id)
				continue
			case !v.needs(s, id):
				fail(0, "stage %q reads stages.%s but does not need it: add %q to its needs", s.ID, id, id)
				continue
			}
			if len(props) < 2 {
				continue
			}
			switch props[1] {
			case "outputs":
				if len(props) >= 3 && !v.open[id] {
					outs := v.env.outputs[id]
					if _, found := outs.index[props[2]]; !found {
						names := sortedKeys(outs.index)
						declared := "it declares no outputs"
						if len(names) > 0 {
							declared = "it declares " + quoteList(names)
						}
						fail(2, "stage %q has no output %q (%s)%s", id, props[2], declared, diag.Suggest(props[2], names))
					}
				}
			case "status":
			default:
				fail(1, "stages.%s has no %q (it has outputs and status)", id, props[1])
			}
		}
	}
	return ok
}

// statusCall returns the first status function (StatusFuncs) an
// expression calls, with its offset; "" when it calls none.
func statusCall(tree *parser.Tree) (string, int) {
	name, at := "", 0
	ast.Walk(&tree.Node, visitFunc(func(n *ast.Node) {
		if id, ok := (*n).(*ast.IdentifierNode); ok && name == "" && isStatusFunc(id.Value) {
			name, at = id.Value, id.Location().From
		}
	}))
	return name, at
}

// UsesStatusFuncs reports whether a stage's `if` calls success(),
// failure(), always() or cancelled(). Such a stage waits for every stage
// it needs to end, however it ended, and its condition decides; any other
// stage runs only when what it needs succeeded (an implicit success()).
func UsesStatusFuncs(s *Stage) bool {
	if s == nil || s.If == nil {
		return false
	}
	for _, part := range s.If.Parts {
		if part.Expr == "" {
			continue
		}
		if tree, err := parser.Parse(part.Expr); err == nil {
			if name, _ := statusCall(tree); name != "" {
				return true
			}
		}
	}
	return false
}

// checkEnvName warns about `env.NAME` when NAME is set nowhere the run
// will look: the stage's env, the pipeline's, or Options.Env.
func (v *validator) checkEnvName(t *Template, pos Pos, s *Stage, name string) {
	if v.opts.Env == nil {
		return
	}
	if s != nil {
		if _, ok := s.Env[name]; ok {
			return
		}
	}
	if _, ok := v.p.Env[name]; ok {
		return
	}
	if _, ok := v.opts.Env[name]; ok {
		return
	}
	v.errs.warn(pos, "%s: env.%s is not set in the spec's env or the environment: it reads as an empty string", t.what, name)
}

// memberChain flattens a.b.c into root "a" and props ["b","c"], with each
// property's offset in the expression. It returns "" when the chain is not
// rooted at an identifier or uses a computed property.
func memberChain(m *ast.MemberNode) (root string, props []string, locs []int) {
	var n ast.Node = m
	for {
		switch x := n.(type) {
		case *ast.MemberNode:
			str, ok := x.Property.(*ast.StringNode)
			if !ok {
				return "", nil, nil
			}
			props = append([]string{str.Value}, props...)
			locs = append([]int{x.Property.Location().From}, locs...)
			n = x.Node
		case *ast.IdentifierNode:
			return x.Value, props, locs
		default:
			return "", nil, nil
		}
	}
}

type visitFunc func(n *ast.Node)

func (f visitFunc) Visit(n *ast.Node) { f(n) }

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// clusters checks rank table files named by the pipeline and its stages.
func (v *validator) clusters() {
	check := func(c *Cluster, what string) {
		if c == nil || c.RankTable == "" {
			return
		}
		if v.opts.CheckRankTable == nil {
			return
		}
		path := v.p.Resolve(c.RankTable)
		n, problems, err := v.opts.CheckRankTable(path)
		if errors.Is(err, fs.ErrNotExist) {
			v.errs.add(c.TablePos, "%s.rank_table: file %s not found (the path is relative to the spec file)", what, path)
			return
		}
		if err != nil {
			v.errs.add(c.TablePos, "%s.rank_table: %v", what, err)
			return
		}
		v.errs = append(v.errs, problems...)
		if problems.Err() != nil {
			v.errs.add(c.TablePos, "%s.rank_table: %s is not a valid rank table", what, c.RankTable)
			return
		}
		if c.Devices != 0 && n != c.Devices {
			v.errs.add(c.DevicesPos, "%s.devices: %d does not match the %d devices of rank table %s", what, c.Devices, n, c.RankTable)
			return
		}
		v.tableDevices[c] = n
	}
	check(v.p.Cluster, "cluster")
	for _, s := range v.p.Stages {
		check(s.Cluster, "stages."+s.ID+".cluster")
	}
	v.staticDeviceCounts(v.p.Cluster, "cluster")
	for _, s := range v.p.Stages {
		v.staticDeviceCounts(s.Cluster, "stages."+s.ID+".cluster")
	}
}

// staticDeviceCounts checks a devices expression that reads only params
// (their defaults, or -p values in Options.Params) with the rules run
// applies, so `-p n=3` for `devices: ${{ params.n }}` is refused before
// any stage runs.
func (v *validator) staticDeviceCounts(c *Cluster, what string) {
	if c == nil || c.DevicesExpr == nil || v.env == nil {
		return
	}
	sc := &staticScopeValue{Scope: Scope{Params: v.paramValues()}, hostsUnknown: true}
	val, ok := v.staticEval(c.DevicesExpr, sc)
	if !ok {
		return
	}
	n, err := ConvertValue(val, TypeInt)
	if err != nil {
		v.errs.add(c.DevicesPos, "%s.devices: %s is %v, not an integer", what, strings.TrimSpace(c.DevicesExpr.Raw), val)
		return
	}
	if err := CheckDeviceCount(n.(int)); err != nil {
		v.errs.add(c.DevicesPos, "%s.devices: %s is %d: %v", what, strings.TrimSpace(c.DevicesExpr.Raw), n, err)
	}
}

// paramValues are the params' values before the run: -p values
// (Options.Params), else defaults.
func (v *validator) paramValues() map[string]any {
	out := map[string]any{}
	for _, prm := range v.p.Params {
		if val, ok := v.opts.Params[prm.Name]; ok {
			out[prm.Name] = val
		} else if prm.Default != nil {
			out[prm.Name] = prm.Default
		}
	}
	return out
}

// shellCommands refuses what the run could not pass to a shell command as
// data whatever the values: an expression in the body of a here-document
// with a quoted delimiter (see shellRefs).
func (v *validator) shellCommands() {
	for _, s := range v.p.Stages {
		info := v.infos[s.ID]
		cmd := mappingValue(s.With, "command")
		if info == nil || !info.ShellCommand || cmd == nil || cmd.Kind != yaml.ScalarNode {
			continue
		}
		if sh := mappingValue(s.With, "shell"); sh != nil && sh.Kind == yaml.ScalarNode && sh.Value == "false" {
			continue
		}
		for _, t := range s.Templates {
			if t.Node() != cmd {
				continue
			}
			values := make([]any, len(t.Parts))
			for i := range values {
				values[i] = 0 // a stand-in any context takes
			}
			next := 0
			if _, _, err := shellRefs(t, values, &next); err != nil && errors.Is(err, ErrQuotedHeredoc) {
				v.errs.add(err.Pos, "stages.%s.with.command: %s: %v", s.ID, err.Msg, err.Err)
			}
		}
	}
}
