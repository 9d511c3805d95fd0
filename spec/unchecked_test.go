package spec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/diag"
)

// uncheckedCatalog knows the stages of catalog, and ./tool as a stage whose
// declaration it does not read.
type uncheckedCatalog struct{ testCatalog }

func (c uncheckedCatalog) Stage(uses string) (*StageInfo, error) {
	if uses == "./tool" {
		return nil, fmt.Errorf("%w: plugin binary ./tool was not started", ErrUnchecked)
	}
	return c.testCatalog.Stage(uses)
}

func TestUncheckedStageIsAWarningAndItsOutputsAreOpen(t *testing.T) {
	src := `version: 1
name: unchecked
stages:
  t:
    uses: ./tool
    with: {anything: [1, 2], goes: here}
  b:
    uses: use
    needs: [t]
    if: "${{ stages.t.outputs.ready && stages.t.status == 'succeeded' }}"
    with:
      count: "${{ stages.t.outputs.n + 1 }}"
      label: "${{ stages.t.outputs.whatever }}"
`
	p, errs := Parse("p.yaml", []byte(src))
	errs = append(errs, Validate(p, uncheckedCatalog{catalog}, Options{})...)
	want := diag.Diagnostic{File: "p.yaml", Line: 5, Column: 11, Severity: diag.Warning,
		Message: "stages.t.uses: with: not checked: plugin binary ./tool was not started"}
	if len(errs) != 1 || errs[0] != want {
		t.Fatalf("got %v, want only the warning %v", errs, want)
	}
	if errs.Err() != nil {
		t.Fatalf("a warning made the spec invalid: %v", errs.Err())
	}

	r, err := NewResolver(p, uncheckedCatalog{catalog})
	if err != nil {
		t.Fatal(err)
	}
	sc := &Scope{Stages: map[string]StageValue{"t": {Status: "succeeded", Outputs: map[string]any{"ready": true, "n": 4, "whatever": "w"}}}}
	with, err := r.With(p.StageByID("b"), sc)
	if err != nil {
		t.Fatal(err)
	}
	if with["count"] != 5 || with["label"] != "w" {
		t.Errorf("with = %v, want count 5 and label w", with)
	}
}

// The rest of the spec is still checked around an unchecked stage.
func TestUncheckedStageKeepsOtherChecks(t *testing.T) {
	src := `version: 1
name: unchecked
stages:
  t:
    uses: ./tool
  b:
    uses: use
    with:
      label: "${{ stages.t.outputs.n }}"
  c:
    uses: use
    needs: [t]
    with:
      label: "${{ stages.t.result }}"
      count: 0
`
	p, errs := Parse("p.yaml", []byte(src))
	errs = append(errs, Validate(p, uncheckedCatalog{catalog}, Options{})...)
	var got []string
	for _, d := range errs {
		got = append(got, fmt.Sprintf("%d:%d %s: %s", d.Line, d.Column, d.Severity, d.Message))
	}
	want := []string{
		"5:11 warning: stages.t.uses: with: not checked: plugin binary ./tool was not started",
		`9:26 error: stages.b.with.label: stage "b" reads stages.t but does not need it: add "t" to its needs`,
		`14:28 error: stages.c.with.label: stages.t has no "result" (it has outputs and status)`,
		"15:14 error: stages.c.with.count: minimum: got 0, want 1",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
