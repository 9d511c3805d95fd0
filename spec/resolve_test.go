package spec

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestResolveScope evaluates expressions over every namespace of the scope
// and formats non-whole templates into strings.
func TestResolveScope(t *testing.T) {
	src := `version: 1
name: scope
params:
  f: {type: float, default: 0.5}
  l: {type: list, default: [1, 2]}
  m: {type: map, default: {k: v}}
  n: {type: int, default: 2}
cluster: {devices: "${{ params.n * 2 }}"}
stages:
  a: {uses: gen}
  b:
    uses: gen
    needs: a
    cluster: {devices: "${{ stages.a.outputs.n }}"}
    if: "${{ stages.a.status == 'succeeded' && env.MODE == 'fast' }}"
    with:
      text: "f=${{ params.f }} l=${{ params.l }} m=${{ params.m.k }} nil=${{ nil }} dir=${{ stages.a.outputs.dir }}"
      run: "${{ run.id }}/${{ run.name }}/${{ run.dir }}"
      cluster: "${{ cluster.devices }}x${{ cluster.hosts }} ${{ cluster.rank_table }}"
      nested: [{deep: "${{ params.l }}"}, 3, true]
`
	p := mustValid(t, src)
	r, err := NewResolver(p, catalog)
	if err != nil {
		t.Fatal(err)
	}
	sc := &Scope{
		Params:  map[string]any{"f": 0.5, "l": []any{1, 2}, "m": map[string]any{"k": "v"}, "n": 2},
		Cluster: ClusterValue{Devices: 8, Hosts: 1, RankTable: "t.json"},
		Stages:  map[string]StageValue{"a": {Status: "succeeded", Outputs: map[string]any{"n": 4.0, "dir": "/d"}}},
		Env:     map[string]string{"MODE": "fast"},
		Run:     RunValue{ID: "r1", Name: "scope", Dir: "/runs/r1"},
	}
	b := p.StageByID("b")
	with, err := r.With(b, sc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"text":    "f=0.5 l=[1,2] m=v nil= dir=/d",
		"run":     "r1/scope//runs/r1",
		"cluster": "8x1 t.json",
		"nested":  []any{map[string]any{"deep": []any{1, 2}}, 3, true},
	}
	if !reflect.DeepEqual(with, want) {
		t.Errorf("with = %#v\nwant   %#v", with, want)
	}
	if run, err := r.If(b, sc); err != nil || !run {
		t.Errorf("if = %v, %v; want true", run, err)
	}
	sc.Env["MODE"] = "slow"
	if run, err := r.If(b, sc); err != nil || run {
		t.Errorf("if with MODE=slow = %v, %v; want false", run, err)
	}
	if run, err := r.If(p.StageByID("a"), sc); err != nil || !run {
		t.Errorf("a stage without if: %v, %v; want true", run, err)
	}

	// Device counts: a literal, an expression, and values HCCL refuses.
	if n, err := r.Devices(p.Cluster, sc); err != nil || n != 4 {
		t.Errorf("pipeline devices = %d, %v; want 4", n, err)
	}
	if n, err := r.Devices(b.Cluster, sc); err != nil || n != 4 {
		t.Errorf("stage devices = %d, %v; want 4", n, err)
	}
	if n, err := r.Devices(&Cluster{Devices: 8}, sc); err != nil || n != 8 {
		t.Errorf("literal devices = %d, %v", n, err)
	}
	sc.Stages["a"] = StageValue{Outputs: map[string]any{"n": 3}}
	if _, err := r.Devices(b.Cluster, sc); err == nil || err.Error() != "p.yaml:14:24: cluster.devices: HCCL supports 1, 2, 4 or 8 devices on one host, not 3" {
		t.Errorf("3 devices: %v", err)
	}
	sc.Stages["a"] = StageValue{Outputs: map[string]any{"n": 2.5}}
	if _, err := r.Devices(b.Cluster, sc); err == nil || !strings.Contains(err.Error(), "stages.a.outputs.n: expected an integer") {
		t.Errorf("2.5 devices: %v", err)
	}
}

func TestResolveBeforeValidate(t *testing.T) {
	p, errs := Parse("p.yaml", []byte(goodSpec))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	r, err := NewResolver(p, catalog)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.With(p.StageByID("b"), &Scope{})
	if !errors.Is(err, ErrNotValidated) {
		t.Errorf("With before Validate: %v, want ErrNotValidated", err)
	}
	// A resolver refuses a pipeline whose stages the catalog does not know.
	p, _ = Parse("p.yaml", []byte(strings.Replace(goodSpec, "uses: gen", "uses: gem", 1)))
	if _, err := NewResolver(p, catalog); err == nil || !strings.Contains(err.Error(), `stages.a.uses: unknown stage (did you mean "gen"?)`) {
		t.Errorf("NewResolver with an unknown stage: %v", err)
	}
}

func TestConvertValue(t *testing.T) {
	tests := []struct {
		v    any
		typ  Type
		want any
		err  string
	}{
		{3, TypeInt, 3, ""},
		{int64(3), TypeInt, 3, ""},
		{3.0, TypeInt, 3, ""},
		{3.5, TypeInt, nil, "expected an integer"},
		{1e300, TypeInt, nil, "expected an integer"},
		{"3", TypeInt, nil, "expected an integer"},
		{2, TypeFloat, 2.0, ""},
		{int64(2), TypeFloat, 2.0, ""},
		{0.5, TypeFloat, 0.5, ""},
		{"0.5", TypeFloat, nil, "expected a number"},
		{"/p", TypePath, "/p", ""},
		{1, TypeString, nil, "expected a string"},
		{false, TypeBool, false, ""},
		{0, TypeBool, nil, "expected a boolean"},
		{[]any{1}, TypeList, []any{1}, ""},
		{map[string]any{}, TypeList, nil, "expected a list"},
		{map[string]any{"a": 1}, TypeMap, map[string]any{"a": 1}, ""},
		{[]any{}, TypeMap, nil, "expected a mapping"},
		{"anything", TypeAny, "anything", ""},
		{1, Type("decimal"), nil, `unknown type "decimal"`},
	}
	for _, tt := range tests {
		got, err := ConvertValue(tt.v, tt.typ)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("ConvertValue(%#v, %s) error = %v, want %q", tt.v, tt.typ, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ConvertValue(%#v, %s) = %#v, %v; want %#v", tt.v, tt.typ, got, err, tt.want)
		}
	}
}

func TestPipelineLookups(t *testing.T) {
	p := mustValid(t, goodSpec+"  c: {uses: gen, cluster: {devices: 2}}\n")
	if prm := p.Param("epochs"); prm == nil || prm.Type != TypeInt || prm.Default != 3 {
		t.Errorf("Param(epochs) = %+v", prm)
	}
	if p.Param("nope") != nil || p.StageByID("nope") != nil {
		t.Error("lookups of unknown names returned something")
	}
	if c := p.EffectiveCluster(p.StageByID("c")); c.Devices != 2 {
		t.Errorf("stage cluster = %+v, want its own 2 devices", c)
	}
	if c := p.EffectiveCluster(p.StageByID("a")); c.Devices != 8 {
		t.Errorf("stage without cluster = %+v, want the pipeline's 8 devices", c)
	}
	if c := (&Pipeline{}).EffectiveCluster(nil); c.Devices != 1 {
		t.Errorf("no cluster anywhere = %+v, want 1 device", c)
	}
	base := &Pipeline{BaseDir: filepath.FromSlash("/specs")}
	if got := base.Resolve("t.json"); got != filepath.Join("/specs", "t.json") {
		t.Errorf("Resolve(relative) = %s", got)
	}
	if got := base.Resolve("/abs/t.json"); got != "/abs/t.json" {
		t.Errorf("Resolve(absolute) = %s", got)
	}
	if got := base.Resolve(""); got != "" {
		t.Errorf("Resolve(\"\") = %q", got)
	}
	if tmpl := p.StageByID("b").If; tmpl.String() != "${{ stages.a.outputs.loss < 2.5 && params.epochs > 1 }}" {
		t.Errorf("template String() = %q", tmpl)
	}
}

// TestResolveShellCommand: for a stage whose command runs through the
// shell, expression values reach it as environment variables, never as
// shell syntax; commands that do not run through a shell keep the values.
func TestResolveShellCommand(t *testing.T) {
	cat := testCatalog{"gen": catalog["gen"], "exec": {Name: "exec", ShellCommand: true}}
	src := `version: 1
name: sh
params:
  x: {type: string, default: "a; rm -rf /"}
stages:
  a: {uses: gen}
  quoted: {uses: exec, needs: a, with: {command: "echo ${{ params.x }} '${{ stages.a.outputs.dir }}'"}}
  argv: {uses: exec, with: {command: ["echo", "${{ params.x }}"]}}
  list_shell: {uses: exec, with: {shell: true, command: ["sh", "-c", "echo ${{ params.x }}"], env: {K: v}}}
  no_shell: {uses: exec, with: {shell: false, command: "echo ${{ params.x }}"}}
  taken: {uses: exec, with: {command: "echo ${{ params.x }}", env: {MSPIPE_EXPR_1: mine}}}
  plain: {uses: exec, with: {command: "echo plain"}}
`
	p, errs := Parse("p.yaml", []byte(src))
	if errs = append(errs, Validate(p, cat, Options{})...); len(errs) != 0 {
		t.Fatal(errs)
	}
	r, err := NewResolver(p, cat)
	if err != nil {
		t.Fatal(err)
	}
	evil := "a; rm -rf /"
	sc := &Scope{Params: map[string]any{"x": evil}, Stages: map[string]StageValue{"a": {Outputs: map[string]any{"dir": "/d x"}}}}
	tests := []struct {
		stage string
		want  map[string]any
	}{
		{"quoted", map[string]any{
			// Inside single quotes the reference closes them, stands in
			// double quotes, and reopens them.
			"command": `echo "${MSPIPE_EXPR_1}" ''"${MSPIPE_EXPR_2}"''`,
			"env":     map[string]any{"MSPIPE_EXPR_1": evil, "MSPIPE_EXPR_2": "/d x"},
		}},
		{"argv", map[string]any{"command": []any{"echo", evil}}},
		{"list_shell", map[string]any{
			"shell":   true,
			"command": []any{"sh", "-c", `echo "${MSPIPE_EXPR_1}"`},
			"env":     map[string]any{"K": "v", "MSPIPE_EXPR_1": evil},
		}},
		{"no_shell", map[string]any{"shell": false, "command": "echo " + evil}},
		{"plain", map[string]any{"command": "echo plain"}},
	}
	shellData := func(id string) (map[string]any, error) {
		with, err := r.With(p.StageByID(id), sc)
		if err != nil {
			return nil, err
		}
		return r.ShellData(p.StageByID(id), sc, with)
	}
	for _, tt := range tests {
		got, err := shellData(tt.stage)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: with = %#v, %v\nwant %#v", tt.stage, got, err, tt.want)
		}
	}
	_, err = shellData("taken")
	if err == nil || err.Error() != "p.yaml:11:3: stages.taken.with.env.MSPIPE_EXPR_1: the name is reserved for expression values in the command" {
		t.Errorf("a user env name that collides: %v", err)
	}
}
