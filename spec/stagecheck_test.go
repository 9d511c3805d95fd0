package spec

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// checkingStage is a stage whose own check records what it was asked and
// answers with the problems the test sets.
type checkingStage struct {
	asked    []CheckRequest
	problems []CheckProblem
	err      error
}

func (c *checkingStage) info(name string, schema string) *StageInfo {
	info := &StageInfo{Name: name, Check: func(_ context.Context, req CheckRequest) ([]CheckProblem, error) {
		c.asked = append(c.asked, req)
		return c.problems, c.err
	}}
	if schema != "" {
		info.WithSchema = []byte(schema)
	}
	return info
}

func validateWith(t *testing.T, src string, cat Catalog, opts Options) []string {
	t.Helper()
	p, errs := Parse(filepath.Join("specs", "p.yaml"), []byte(src))
	if errs.Err() != nil {
		t.Fatal(errs)
	}
	var out []string
	for _, d := range Validate(p, cat, opts) {
		out = append(out, d.Error())
	}
	return out
}

func TestStageCheckProblemsAtTheirPlace(t *testing.T) {
	train := &checkingStage{problems: []CheckProblem{
		{Path: "/strategy/fc.matmul", Message: "product 2 of the splits does not divide 8 devices"},
		{Path: "/strategy/fc.matmul/1/1", Message: "dimension 10 is not divisible by 2"},
		{Path: "/strategy/conv9", Message: "unknown operator"}, // not in the spec: its parent
		{Path: "/a~1b", Message: "escaped key"},
		{Path: "", Message: "the whole block"},
	}}
	cat := testCatalog{"gen": {Name: "gen", Outputs: []OutputDecl{{Name: "dir", Type: TypeString}}}, "npu/train": train.info("npu/train", `{"type":"object"}`)}
	src := `version: 1
name: c
cluster: {devices: 8}
stages:
  prepare: {uses: gen}
  train:
    uses: npu/train
    needs: [prepare]
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      strategy:
        fc.matmul: [[1, 1], [1, 2]]
      a/b: 1
`
	got := validateWith(t, src, cat, Options{})
	want := []string{
		"specs/p.yaml:10:7: error: stages.train.with: the whole block",
		"specs/p.yaml:12:9: error: stages.train.with.strategy.conv9: unknown operator",
		"specs/p.yaml:12:20: error: stages.train.with.strategy.fc.matmul: product 2 of the splits does not divide 8 devices",
		"specs/p.yaml:12:33: error: stages.train.with.strategy.fc.matmul[1][1]: dimension 10 is not divisible by 2",
		"specs/p.yaml:13:12: error: stages.train.with.a/b: escaped key",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(train.asked) != 1 {
		t.Fatalf("Check called %d times, want 1", len(train.asked))
	}
	req := train.asked[0]
	wantWith := map[string]any{"strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}, "a/b": 1}
	if !reflect.DeepEqual(req.With, wantWith) || !reflect.DeepEqual(req.Unknown, []string{"data"}) || req.Devices != 8 || req.RankTable != "" {
		t.Errorf("request = %+v", req)
	}
}

func TestStageCheckUnknownKeys(t *testing.T) {
	st := &checkingStage{}
	cat := testCatalog{"gen": {Name: "gen", Outputs: []OutputDecl{{Name: "dir", Type: TypeString}}}, "s": st.info("s", "")}
	src := `version: 1
name: c
params:
  epochs: {type: int, default: 2}
  tag: {type: string}
  lr: {type: float, default: 0.5}
cluster: {devices: 16}
stages:
  prepare: {uses: gen}
  s:
    uses: s
    needs: [prepare]
    with:
      data: "${{ stages.prepare.outputs.dir }}"
      epochs: "${{ params.epochs }}"
      lr: "${{ params.lr * 2 }}"
      tag: "${{ params.tag }}"
      shards: "${{ cluster.devices }}"
      hosts: "${{ cluster.hosts }}"
      label: "run ${{ run.id }} of ${{ params.epochs }}"
      home: "${{ env.HOME }}"
      nested: {fixed: 1, later: ["${{ stages.prepare.status }}"]}
      list: [1, "${{ params.epochs + 1 }}"]
      count: "${{ len(filter([1, 2, 3], # > params.epochs)) }}"
`
	if got := validateWith(t, src, cat, Options{}); len(got) != 0 {
		t.Fatalf("problems: %v", got)
	}
	req := st.asked[0]
	wantWith := map[string]any{"epochs": 2, "lr": 1.0, "shards": 16, "hosts": 2, "list": []any{1, 3}, "count": 1}
	wantUnknown := []string{"data", "home", "label", "nested", "tag"}
	if !reflect.DeepEqual(req.With, wantWith) || !reflect.DeepEqual(req.Unknown, wantUnknown) {
		t.Errorf("with = %#v, unknown = %v\nwant %#v, %v", req.With, req.Unknown, wantWith, wantUnknown)
	}

	// A value given on the command line takes the default's place and
	// makes a param without default known.
	st.asked = nil
	validateWith(t, src, cat, Options{Params: map[string]any{"tag": "v2", "epochs": 5}})
	req = st.asked[0]
	if req.With["tag"] != "v2" || req.With["epochs"] != 5 || req.With["label"] != nil || slices.Contains(req.Unknown, "tag") {
		t.Errorf("with command-line params: with = %v, unknown = %v", req.With, req.Unknown)
	}
}

func TestStageCheckCluster(t *testing.T) {
	tests := []struct {
		name      string
		pipeline  string // the pipeline's cluster line, or ""
		stage     string // the stage's cluster, or ""
		devices   int
		rankTable string
		hosts     any // with.hosts as the check sees it; nil when unknown
	}{
		{"pipeline devices", "cluster: {devices: 8}", "", 8, "", 1},
		{"stage devices win", "cluster: {devices: 8}", "{devices: 4}", 4, "", 1},
		{"no cluster: one device", "", "", 1, "", 1},
		{"devices from a param", "cluster: {devices: \"${{ params.n }}\"}", "", 16, "", 2},
		{"devices from the rank table", "cluster: {rank_table: eight.json}", "", 8, filepath.Join("specs", "eight.json"), nil},
		{"stage rank table", "cluster: {devices: 2}", "{rank_table: eight.json}", 8, filepath.Join("specs", "eight.json"), nil},
		{"invalid rank table", "cluster: {rank_table: bad.json}", "", 0, filepath.Join("specs", "bad.json"), nil},
		{"devices from an output", "", "{devices: \"${{ stages.prepare.outputs.n }}\"}", 0, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &checkingStage{}
			cat := testCatalog{"gen": {Name: "gen", Outputs: []OutputDecl{{Name: "n", Type: TypeInt}}}, "s": st.info("s", "")}
			cluster := ""
			if tt.stage != "" {
				cluster = "\n    cluster: " + tt.stage
			}
			src := "version: 1\nname: c\nparams:\n  n: {type: int, default: 16}\n" + tt.pipeline + `
stages:
  prepare: {uses: gen}
  s:
    uses: s
    needs: [prepare]` + cluster + `
    with: {hosts: "${{ cluster.hosts }}"}
`
			tables := &fakeTables{}
			validateWith(t, src, cat, Options{CheckRankTable: tables.check})
			if len(st.asked) != 1 {
				t.Fatalf("Check called %d times", len(st.asked))
			}
			req := st.asked[0]
			if req.Devices != tt.devices || req.RankTable != tt.rankTable || req.With["hosts"] != tt.hosts {
				t.Errorf("request = %+v, want devices %d, rank table %q, hosts %v", req, tt.devices, tt.rankTable, tt.hosts)
			}
		})
	}
}

func TestStageCheckSkippedOrFailing(t *testing.T) {
	st := &checkingStage{problems: []CheckProblem{{Path: "/n", Message: "never reported"}}}
	cat := testCatalog{"s": st.info("acme/s", `{"type":"object","properties":{"n":{"type":"integer"}}}`)}
	// A block the schema refuses is not handed to the stage.
	got := validateWith(t, "version: 1\nname: c\nstages:\n  s: {uses: s, with: {n: x}}\n", cat, Options{})
	if len(got) != 1 || !strings.Contains(got[0], "stages.s.with.n: got string, want integer") || len(st.asked) != 0 {
		t.Errorf("schema failure: problems %v, Check called %d times", got, len(st.asked))
	}
	// A check that fails is a warning naming the plugin, not an error.
	st.err = errors.New("plugin exited (exit status 2)")
	got = validateWith(t, "version: 1\nname: c\nstages:\n  s: {uses: s, with: {n: 1}}\n", cat, Options{})
	want := []string{"specs/p.yaml:4:13: warning: stages.s.uses: stage acme/s could not check its with: plugin exited (exit status 2)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("failing check: %v\nwant %v", got, want)
	}
}
