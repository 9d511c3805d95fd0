package spec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// A long needs chain is validated in memory that grows with its length:
// before, every stage kept a table of all its ancestors, and 7,000 stages
// took 1.3 GB. The last stage reads the first one's outputs, so the
// visibility check walks the whole chain.
func TestLongChainMemory(t *testing.T) {
	const n = 3000
	var b strings.Builder
	b.WriteString("version: 1\nname: chain\nstages:\n  s0: {uses: gen}\n")
	for i := 1; i < n-1; i++ {
		fmt.Fprintf(&b, "  s%d: {uses: gen, needs: [s%d]}\n", i, i-1)
	}
	fmt.Fprintf(&b, "  s%d: {uses: use, needs: [s%d], with: {count: \"${{ stages.s0.outputs.n }}\"}}\n", n-1, n-2)
	src := []byte(b.String())

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, errs := Parse("chain.yaml", src)
	errs = append(errs, Validate(p, catalog, Options{})...)
	runtime.ReadMemStats(&after)
	if err := errs.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("validating a %d-stage chain allocated %d MiB", n, (after.TotalAlloc-before.TotalAlloc)>>20)
	// The ancestor tables took 404 MiB here.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("validating a %d-stage chain allocated %d MiB, want under 64 MiB", n, alloc>>20)
	}
	// Reading a stage that is not needed is still refused.
	p, errs = Parse("chain.yaml", []byte(strings.Replace(string(src), fmt.Sprintf("needs: [s%d], with", n-2), "with", 1)))
	errs = append(errs, Validate(p, catalog, Options{})...)
	if !strings.Contains(errs.Err().Error(), fmt.Sprintf(`stage "s%d" reads stages.s0 but does not need it`, n-1)) {
		t.Errorf("unneeded stage read: %v", errs)
	}
}
