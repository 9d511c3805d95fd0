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
// `with` blocks against the schema instead (see the package doc).
func TestNoHeavyDependencies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/santhosh-tekuri/jsonschema", "golang.org/x/text/message", "github.com/mspipe/mspipe/spec"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("package sdk depends on %s", dep)
			}
		}
	}
}
