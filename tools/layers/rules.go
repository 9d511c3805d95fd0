package main

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// module is the import path every package of the tree starts with.
const module = "github.com/mspipe/mspipe"

// rule forbids the packages under From, but for those under one of
// Except, to depend on any package under one of Not. Paths are relative to
// the module; a path names a package and every package below it.
type rule struct {
	From   string
	Except []string
	Not    []string
	Why    string
}

// planner is the pseudo-package of the CLI's plan*.go files (see
// plannerDeps): the planner reads parallel plans and must not need a
// stage to do it.
const planner = "cmd/mspipe/internal/cli[plan*.go]"

// rules are the layers, from the ground up.
var rules = []rule{
	{From: "internal", Not: []string{"cmd", "pipeline", "spec", "plugins", "stages", "bench", "tools"},
		Why: "internal/ is the ground every layer stands on"},
	{From: "npu", Not: []string{"cmd", "pipeline", "spec", "plugins", "stages", "bench", "tools"},
		Why: "the simulated NPU knows nothing of specs, runs or plugins; a stage is the only bridge"},
	{From: "spec", Not: []string{"cmd", "pipeline", "plugins", "stages"},
		Why: "a spec is read and checked, never run"},
	{From: "plugins", Except: []string{"plugins/host", "plugins/catalog"},
		Not: []string{"cmd", "pipeline", "spec", "stages", "plugins/host", "plugins/catalog"},
		Why: "a plugin links the protocol and the SDK only"},
	{From: "plugins/host", Not: []string{"cmd", "pipeline", "spec", "stages", "plugins/catalog"},
		Why: "the host starts and stops plugin processes and knows neither specs nor the engine"},
	{From: "plugins/catalog", Not: []string{"cmd", "stages"},
		Why: "the catalog is handed the built-in stages, it does not list them"},
	{From: "pipeline", Not: []string{"cmd", "stages", "plugins/host", "plugins/catalog", "plugins/sdk"},
		Why: "the engine knows a stage launcher, not concrete stages or how they are started"},
	{From: "stages", Not: []string{"cmd", "pipeline", "spec", "plugins/host", "plugins/catalog"},
		Why: "a stage is a plugin: it sees the protocol, not mspipe's side of it"},
	// Until the rank job leaves stages/npu/train (issue 23), bench/parallel
	// and the planner import that stage, and the two rules below fail.
	{From: "bench", Not: []string{"cmd", "pipeline", "plugins", "stages"},
		Why: "a benchmark measures the npu packages, not a stage"},
	{From: planner, Not: []string{"stages"},
		Why: "the planner asks npu/parallel, not the train stage"},
}

// under reports whether pkg (relative to the module) is dir or below it.
func under(pkg, dir string) bool {
	return pkg == dir || strings.HasPrefix(pkg, dir+"/")
}

// underAny reports whether pkg is under one of dirs.
func underAny(pkg string, dirs []string) bool {
	return slices.ContainsFunc(dirs, func(dir string) bool { return under(pkg, dir) })
}

// violations lists each package of deps (by package, the packages it
// depends on, all relative to the module) that breaks a rule, with the
// forbidden dependencies it has: one line a package and rule, sorted.
func violations(deps map[string][]string, rules []rule) []string {
	var out []string
	for pkg, ds := range deps {
		for _, r := range rules {
			if !under(pkg, r.From) || underAny(pkg, r.Except) {
				continue
			}
			var bad []string
			for _, d := range ds {
				if d != pkg && underAny(d, r.Not) {
					bad = append(bad, d)
				}
			}
			if len(bad) > 0 {
				slices.Sort(bad)
				out = append(out, fmt.Sprintf("%s depends on %s: %s", pkg, strings.Join(slices.Compact(bad), ", "), r.Why))
			}
		}
	}
	slices.Sort(out)
	return out
}

// relative strips the module from an import path; ok is false for a
// package outside the module.
func relative(importPath string) (string, bool) {
	if importPath == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(importPath, module+"/")
	return path.Clean(rel), ok
}
