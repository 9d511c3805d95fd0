package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLayers fails on every package of the tree that depends on a layer
// its rule forbids (see rules).
func TestLayers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	deps, err := loadDeps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The graph is the real one: the ground and the top are both there.
	for _, pkg := range []string{"internal/atomicfile", "cmd/mspipe/internal/cli", planner} {
		if _, ok := deps[pkg]; !ok {
			t.Fatalf("no package %s in go list's answer", pkg)
		}
	}
	if !slices.Contains(deps["cmd/mspipe/internal/cli"], "internal/atomicfile") {
		t.Fatalf("the CLI's dependencies %v lack internal/atomicfile", deps["cmd/mspipe/internal/cli"])
	}
	for _, v := range violations(deps, rules) {
		t.Error(v)
	}
}

// TestViolations checks the rules' matching on a small graph: a forbidden
// dependency is found however deep, a subtree is excepted, and a path
// that merely starts like a forbidden one is not taken for it.
func TestViolations(t *testing.T) {
	deps := map[string][]string{
		"internal/diag":     {"internal/diag", "spec"},
		"internal/ok":       {"internal/ok", "internal/diag", "specs"},
		"plugins":           {"plugins", "plugins/proto"},
		"plugins/sdk":       {"plugins/sdk", "plugins", "plugins/host"},
		"plugins/host":      {"plugins/host", "plugins", "internal/procgroup"},
		"plugins/catalog":   {"plugins/catalog", "plugins/host", "spec", "pipeline"},
		planner:             {"npu/parallel", "stages/npu/train", "plugins"},
		"cmd/mspipe/other":  {"stages/npu/train"},
		"bench/parallel/go": {"npu/shard"},
	}
	rules := []rule{
		{From: "internal", Not: []string{"spec"}, Why: "ground"},
		{From: "plugins", Except: []string{"plugins/host", "plugins/catalog"}, Not: []string{"plugins/host", "spec"}, Why: "protocol"},
		{From: planner, Not: []string{"stages"}, Why: "planner"},
		{From: "bench", Not: []string{"stages"}, Why: "bench"},
	}
	got := violations(deps, rules)
	want := []string{
		planner + " depends on stages/npu/train: planner",
		"internal/diag depends on spec: ground",
		"plugins/sdk depends on plugins/host: protocol",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
