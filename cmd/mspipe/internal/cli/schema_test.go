package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/mspipe/mspipe/plugins/catalog"
	"github.com/mspipe/mspipe/spec"
	"github.com/mspipe/mspipe/stages/builtin"
	"gopkg.in/yaml.v3"
)

// schemaAcceptsFile lists the invalid specs whose problem only the Go
// validator can see (expressions, needs, stage inputs, ...), one name per
// line with the reason after a '#'.
const schemaAcceptsFile = invalidDir + "/schema-accepts.txt"

func readSchemaAccepts(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(schemaAcceptsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(strings.SplitN(sc.Text(), "#", 2)[0])
		if line != "" {
			out[line] = true
		}
	}
	return out
}

// TestSchemaAgreesWithValidator runs the published JSON Schema and the Go
// validator over every example and every invalid spec: both accept the
// examples; both reject each invalid spec, except the listed ones that only
// Go can reject (and for those the schema must really accept, so the list
// stays true).
func TestSchemaAgreesWithValidator(t *testing.T) {
	sch := publishedSchema(t)
	examples, _ := filepath.Glob("../../../../examples/*.yaml")
	if len(examples) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range examples {
		inst, ok := yamlInstance(t, f)
		if !ok {
			t.Errorf("%s: example is not YAML", f)
			continue
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s: schema rejects an example: %v", f, err)
		}
		if res := validateFile(f, catalog.ExecPinned); !res.Valid() {
			t.Errorf("%s: validator rejects an example: %v %v", f, res.Err, res.Diagnostics)
		}
	}
	accepts := readSchemaAccepts(t)
	for _, f := range invalidSpecs(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if res := validateFile(f, catalog.ExecPinned); res.Valid() {
			t.Errorf("%s: Go validator accepts an invalid spec", name)
		}
		inst, ok := yamlInstance(t, f)
		if !ok {
			continue // not YAML at all: neither tool sees a document
		}
		schemaErr := sch.Validate(inst)
		switch {
		case accepts[name] && schemaErr != nil:
			t.Errorf("%s: listed in schema-accepts.txt but the schema rejects it: %v", name, schemaErr)
		case !accepts[name] && schemaErr == nil:
			t.Errorf("%s: the schema accepts it; reject it in the schema or list it in schema-accepts.txt", name)
		}
	}
}

// yamlInstance decodes a YAML file to JSON-like data, as an editor or an
// independent validator would. ok is false when it is not one YAML document.
func yamlInstance(t *testing.T, path string) (any, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return yamlInstanceOf(t, data)
}

func yamlInstanceOf(t *testing.T, data []byte) (any, bool) {
	t.Helper()
	if len(data) > spec.MaxFileSize {
		return nil, false
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, false
	}
	return v, true
}

// publishedSchema compiles what `mspipe schema` prints.
func publishedSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := builtin.PipelineSchema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sch, err := spec.CompileSchema("pipeline", doc)
	if err != nil {
		t.Fatalf("compile the published schema: %v", err)
	}
	return sch
}

// TestPublishedSchemaUpToDate keeps schemas/pipeline.schema.json, the file
// editors and CI validators read, equal to what `mspipe schema` prints
// from the base schema and the built-in stages' declarations.
func TestPublishedSchemaUpToDate(t *testing.T) {
	code, stdout, _ := runCLI(t, "schema")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	onDisk, err := os.ReadFile("../../../../schemas/pipeline.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != string(onDisk) {
		t.Error("schemas/pipeline.schema.json differs from `mspipe schema`; regenerate it from the module root with:\n\tgo run ./cmd/mspipe schema > schemas/pipeline.schema.json")
	}
}

// builtinInputCases are specs whose only problem, if any, is in a
// built-in stage's with: the published schema must see it as mspipe
// validate does, and still take expressions and plugins' own inputs.
var builtinInputCases = []struct {
	name, stage string
	valid       bool
}{
	{"misspelt mode", `{uses: npu/train, with: {data: d, mode: semi_auto_paralel}}`, false},
	{"misspelt launcher", `{uses: npu/train, with: {data: d, launcher: mpirn}}`, false},
	{"epochs as a word", `{uses: npu/train, with: {data: d, epochs: "two"}}`, false},
	{"unknown input", `{uses: npu/train, with: {data: d, batchsize: 32}}`, false},
	{"nested list of the wrong type", `{uses: npu/train, with: {data: d, strategy: {fc.matmul: [[1, "x"]]}}}`, false},
	{"required input missing", `{uses: npu/eval, with: {data: d}}`, false},
	{"required inputs, no with", `{uses: npu/eval}`, false},
	{"enum from a param", `{uses: npu/train, with: {data: d, mode: "${{ params.mode }}", epochs: "${{ params.n }}"}}`, true},
	{"template inside a nested list", `{uses: npu/train, with: {data: d, strategy: {fc.matmul: [[1, "${{ params.n }}"]]}}}`, true},
	{"empty with, nothing required", `{uses: cifar/prepare, with: }`, true},
	{"a plugin's own inputs", `{uses: ./plugins/mspipe-stage-x, with: {mode: anything, epochs: "two"}}`, true},
	{"list command of exec", `{uses: exec, with: {command: [echo, "${{ params.n }}"]}}`, true},
}

// TestSchemaTypesBuiltinInputs checks the published schema on the inputs
// of built-in stages, and that editors get each input's description and
// default.
func TestSchemaTypesBuiltinInputs(t *testing.T) {
	sch := publishedSchema(t)
	for _, tc := range builtinInputCases {
		inst, ok := yamlInstanceOf(t, []byte(builtinInputSpec(tc.stage)))
		if !ok {
			t.Fatalf("%s: not YAML", tc.name)
		}
		err := sch.Validate(inst)
		if tc.valid && err != nil {
			t.Errorf("%s: rejected: %v", tc.name, err)
		}
		if !tc.valid && err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	doc, err := builtin.PipelineSchema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var published struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Description string `json:"description"`
				Default     any    `json:"default"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(doc, &published); err != nil {
		t.Fatal(err)
	}
	mode := published.Defs["with.npu.train"].Properties["mode"]
	if !strings.Contains(mode.Description, "semi_auto_parallel") || mode.Default != "stand_alone" {
		t.Errorf("npu/train's mode: description %q, default %v; want its own description and default stand_alone", mode.Description, mode.Default)
	}
}

func builtinInputSpec(stage string) string {
	return "version: 1\nname: inputs\nstages:\n  s: " + stage + "\n"
}

// TestSchemaStageFlag prints one stage's input schema: the one the stage
// declares; an unknown name is a usage error that lists the built-ins.
func TestSchemaStageFlag(t *testing.T) {
	code, stdout, errOut := runCLI(t, "schema", "--stage", "npu/train")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	descs, err := builtin.Descriptors(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, d := range descs {
		if d.Name == "npu/train" {
			want = d.WithSchema
		}
	}
	var got, declared any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if err := json.Unmarshal(want, &declared); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, declared) {
		t.Errorf("schema --stage npu/train differs from the stage's declaration")
	}
	code, _, errOut = runCLI(t, "schema", "--stage", "npu/tran")
	if code != ExitUsage || !strings.Contains(errOut, `unknown stage "npu/tran"`) || !strings.Contains(errOut, "npu/train") {
		t.Errorf("unknown stage: exit %d, stderr %q", code, errOut)
	}
}

// TestIndependentValidator checks the published schema with ajv-cli, a
// standard validator users run in their own CI: the schema compiles in
// strict mode, the examples validate, and the invalid specs the schema is
// meant to catch are rejected. .ci/run installs ajv-cli and sets MSPIPE_AJV;
// elsewhere the test is skipped unless MSPIPE_REQUIRE_AJV=1.
func TestIndependentValidator(t *testing.T) {
	ajv := os.Getenv("MSPIPE_AJV")
	if ajv == "" {
		if os.Getenv("MSPIPE_REQUIRE_AJV") == "1" {
			t.Fatal("MSPIPE_REQUIRE_AJV=1 but MSPIPE_AJV does not name the ajv binary")
		}
		t.Skip("MSPIPE_AJV not set (.ci/run installs ajv-cli and sets it)")
	}
	schema := "../../../../schemas/pipeline.schema.json"
	out, err := exec.Command(ajv, "compile", "--spec=draft2020", "-s", schema).CombinedOutput()
	if err != nil || strings.Contains(string(out), "strict mode") {
		t.Fatalf("ajv does not accept the schema in strict mode: %v\n%s", err, out)
	}
	// Every file in one ajv process (node starts slowly): want maps each
	// file to whether the schema must accept it.
	want, label := map[string]bool{}, map[string]string{}
	add := func(f, name string, valid bool) {
		want[f], label[f] = valid, name
	}
	examples, _ := filepath.Glob("../../../../examples/*.yaml")
	for _, f := range examples {
		add(f, "example "+f, true)
	}
	dir := t.TempDir()
	for i, tc := range builtinInputCases {
		f := filepath.Join(dir, fmt.Sprintf("case%d.yaml", i))
		if err := os.WriteFile(f, []byte(builtinInputSpec(tc.stage)), 0o644); err != nil {
			t.Fatal(err)
		}
		add(f, tc.name, tc.valid)
	}
	accepts := readSchemaAccepts(t)
	for _, f := range invalidSpecs(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if _, ok := yamlInstance(t, f); !ok || accepts[name] {
			continue
		}
		add(f, "invalid spec "+name, false)
	}
	args := []string{"validate", "--spec=draft2020", "-s", schema, "--errors=line"}
	files := make([]string, 0, len(want))
	for f := range want {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, f := range files {
		args = append(args, "-d", f)
	}
	out, _ = exec.Command(ajv, args...).CombinedOutput() // non-zero when any file is invalid
	verdict := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\n")
		for _, f := range files {
			switch line {
			case f + " valid":
				verdict[f] = true
			case f + " invalid":
				verdict[f] = false
			}
		}
	}
	for _, f := range files {
		got, ok := verdict[f]
		switch {
		case !ok:
			t.Errorf("ajv said nothing about %s (%s):\n%s", f, label[f], out)
		case got && !want[f]:
			t.Errorf("ajv accepts %s (%s), which the schema should reject", f, label[f])
		case !got && want[f]:
			t.Errorf("ajv rejects %s (%s), which the schema should accept", f, label[f])
		}
	}
	if len(files) < 30 {
		t.Errorf("only %d files checked", len(files))
	}
}
