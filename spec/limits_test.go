package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/schemas"
)

// The published schema's device limit is the one the launcher enforces,
// and validate refuses what run would refuse: before, validate accepted
// cluster.devices: 100000 and run then failed.
func TestDeviceLimitIsOneLimit(t *testing.T) {
	var doc struct {
		Defs struct {
			Cluster struct {
				Properties struct {
					Devices struct {
						AnyOf []struct {
							Maximum *int `json:"maximum"`
						} `json:"anyOf"`
					} `json:"devices"`
				} `json:"properties"`
			} `json:"cluster"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schemas.Base, &doc); err != nil {
		t.Fatal(err)
	}
	var max int
	for _, alt := range doc.Defs.Cluster.Properties.Devices.AnyOf {
		if alt.Maximum != nil {
			max = *alt.Maximum
		}
	}
	if want := 8 * ranktable.MaxLocalHosts; max != want {
		t.Errorf("schema allows up to %d devices, the launcher %d", max, want)
	}
	if err := CheckDeviceCount(max); err != nil {
		t.Errorf("the largest count the schema allows is refused: %v", err)
	}
	for _, n := range []int{max + 8, 100000} {
		if err := CheckDeviceCount(n); err == nil || !strings.Contains(err.Error(), "give a rank_table") {
			t.Errorf("CheckDeviceCount(%d) = %v, want a refusal pointing to rank_table", n, err)
		}
	}
	if _, err := ranktable.Generate(ranktable.GenerateOptions{Devices: 8, Hosts: ranktable.MaxLocalHosts, Scheme: ranktable.SchemeLocal}); err != nil {
		t.Errorf("the local scheme cannot generate the largest cluster specs allow: %v", err)
	}
}

// TestExpandedSizeLimit: a small spec whose aliases repeat a large value
// is refused by Parse (so by validate) once the expanded values pass
// MaxExpandedSize. Before, validate passed a 2 MB spec expanding to
// gigabytes and run ran out of memory saving its state.
func TestExpandedSizeLimit(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	spec := func(aliases int) []byte {
		refs := strings.TrimSuffix(strings.Repeat("*big, ", aliases), ", ")
		return []byte("version: 1\nname: bomb\nenv: {BIG: &big \"" + big + "\"}\nstages:\n  a: {uses: gen, with: {x: [" + refs + "]}}\n")
	}
	p, errs := Parse("ok.yaml", spec(2)) // 3 MiB expanded
	errs = append(errs, Validate(p, catalog, Options{})...)
	if errs.Err() != nil {
		t.Fatalf("3 MiB expanded: %v", errs)
	}
	p, errs = Parse("bomb.yaml", spec(8)) // 9 MiB expanded, 1 MiB on disk
	want := "spec expands through aliases to more than 4194304 bytes of values (the limit for a spec)"
	if len(errs) != 1 || errs[0].Code != CodeTooComplex || !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("bomb: %v, want one %s error containing %q", errs, CodeTooComplex, want)
	}
	if extra := Validate(p, catalog, Options{}); len(extra) != 0 {
		t.Errorf("Validate after the refusal: %v", extra)
	}
	if _, err := NewResolver(p, catalog); !errors.Is(err, ErrTooComplex) {
		t.Errorf("NewResolver: %v, want ErrTooComplex", err)
	}
}

// TestResolvedWithSizeLimit: a `with` whose expressions produce more than
// MaxExpandedSize bytes is refused when resolved, with the same limit.
func TestResolvedWithSizeLimit(t *testing.T) {
	p := mustValid(t, "version: 1\nname: w\nparams:\n  s: {type: string, default: x}\nstages:\n  a: {uses: gen, with: {x: [\"${{ params.s }}\", \"${{ params.s }}\"]}}\n")
	r, err := NewResolver(p, catalog)
	if err != nil {
		t.Fatal(err)
	}
	a := p.StageByID("a")
	if _, err := r.With(a, &Scope{Params: map[string]any{"s": strings.Repeat("y", MaxExpandedSize/2-10)}}); err != nil {
		t.Errorf("just under the limit: %v", err)
	}
	_, err = r.With(a, &Scope{Params: map[string]any{"s": strings.Repeat("y", MaxExpandedSize/2+10)}})
	if want := "stages.a.with: resolves to more than 4194304 bytes of values (the limit for a spec)"; err == nil || err.Error() != want {
		t.Errorf("over the limit: %v, want %q", err, want)
	}
}
