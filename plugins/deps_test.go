package plugins

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The protocol is imported by every plugin and by the built-in stages: it
// must not pull in mspipe's side (the host, process handling, the spec, the
// engine, the CLI) nor the JSON Schema library.
func TestProtocolHasNoHostDependencies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/mspipe/mspipe/"
	allowed := map[string]bool{module + "plugins": true, module + "plugins/proto/stage/v1": true}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module) && !allowed[dep] {
			t.Errorf("package plugins depends on %s", dep)
		}
		if strings.HasPrefix(dep, "github.com/santhosh-tekuri/jsonschema") {
			t.Errorf("package plugins depends on %s", dep)
		}
	}
}
