package spec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// chainSpec is a pipeline of n stages, each needing and reading the one
// before it.
func chainSpec(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nname: chain\nstages:\n  s0: {uses: gen}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  s%d: {uses: gen, needs: s%d, with: {x: '${{ stages.s%d.outputs.n }}'}}\n", i, i-1, i-1)
	}
	return []byte(b.String())
}

// validateAllocs returns the bytes allocated by parsing and validating a
// chain of n stages.
func validateAllocs(t *testing.T, n int) uint64 {
	t.Helper()
	data := chainSpec(n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, errs := Parse("chain.yaml", data)
	errs = append(errs, Validate(p, catalog, Options{})...)
	runtime.ReadMemStats(&after)
	if errs.Err() != nil {
		t.Fatal(errs)
	}
	return after.TotalAlloc - before.TotalAlloc
}

// TestValidateMemoryGrowsLinearly: doubling the stages of a chain about
// doubles what validation allocates. Before, every stage kept the set of
// all its ancestors and every compiled expression its own lookup of the
// whole environment type, so memory grew with the square of the stages
// (1.3 GB for a 7,000-stage chain without expressions, 6 GB with them).
func TestValidateMemoryGrowsLinearly(t *testing.T) {
	small := validateAllocs(t, 1000)
	large := validateAllocs(t, 2000)
	t.Logf("1000 stages: %d bytes, 2000 stages: %d bytes", small, large)
	if ratio := float64(large) / float64(small); ratio > 3 {
		t.Errorf("1000 stages allocate %d bytes, 2000 stages %d: %.1f times as much, want about 2", small, large, ratio)
	}
}
