package sdk

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Every plugin binary links this package, and a package's initialisation
// runs at each plugin start: heavy dependencies stay out. The JSON Schema
// library (with x/text/message) cost each start about 10 ms; mspipe checks
// `with` blocks against the schema instead (see the package doc). Nor does
// a plugin link mspipe's side of the protocol: the host, the spec, the
// engine or the CLI.
func TestNoHeavyDependencies(t *testing.T) {
	banned := []string{
		"github.com/santhosh-tekuri/jsonschema",
		"golang.org/x/text/message",
		"github.com/mspipe/mspipe/plugins/host",
		"github.com/mspipe/mspipe/internal/procgroup",
		"github.com/mspipe/mspipe/cmd/mspipe/internal/cli",
		"github.com/mspipe/mspipe/spec",
		"github.com/mspipe/mspipe/pipeline",
		"github.com/mspipe/mspipe/stages",
	}
	for _, dep := range listDeps(t, ".") {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("package sdk depends on %s", dep)
			}
		}
	}
}

// listDeps returns the packages pkg depends on, itself included.
func listDeps(t *testing.T, pkg string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}
