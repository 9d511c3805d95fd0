package cli

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins/catalog"
	"github.com/mspipe/mspipe/schemas"
	"github.com/mspipe/mspipe/spec"
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
	sch, err := spec.CompileSchema("pipeline", schemas.Pipeline)
	if err != nil {
		t.Fatalf("compile embedded schema: %v", err)
	}
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
	if len(data) > spec.MaxFileSize {
		return nil, false
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, false
	}
	return v, true
}

func TestSchemaCommandPrintsEmbeddedSchema(t *testing.T) {
	code, stdout, _ := runCLI(t, "schema")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	onDisk, err := os.ReadFile("../../../../schemas/pipeline.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != string(onDisk) {
		t.Error("mspipe schema prints something other than schemas/pipeline.schema.json")
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
	run := func(args ...string) (string, error) {
		out, err := exec.Command(ajv, append(args, "--spec=draft2020", "-s", schema)...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("compile"); err != nil || strings.Contains(out, "strict mode") {
		t.Fatalf("ajv does not accept the schema in strict mode: %v\n%s", err, out)
	}
	examples, _ := filepath.Glob("../../../../examples/*.yaml")
	for _, f := range examples {
		if out, err := run("validate", "-d", f); err != nil {
			t.Errorf("ajv rejects example %s: %v\n%s", f, err, out)
		}
	}
	accepts := readSchemaAccepts(t)
	for _, f := range invalidSpecs(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if _, ok := yamlInstance(t, f); !ok || accepts[name] {
			continue
		}
		if out, err := run("validate", "-d", f); err == nil {
			t.Errorf("ajv accepts invalid spec %s, which the schema should reject:\n%s", name, out)
		}
	}
}
