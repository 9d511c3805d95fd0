package builtin

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A built-in stage runs in a plugin process (`mspipe __stage NAME`) where
// only the stage and plugins/sdk work: the stages must not link the spec
// package or the JSON Schema library, so that such a process never
// compiles a schema. mspipe checks every `with` against the stage's schema
// before the stage starts (pipeline.runner.checkWith); the stage decodes
// its `with` strictly into its Go type.
func TestStagesCompileNoSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/mspipe/mspipe/spec" || strings.HasPrefix(dep, "github.com/santhosh-tekuri/jsonschema") {
			t.Errorf("the built-in stages depend on %s", dep)
		}
	}
}
