package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/gobuild"

	"github.com/mspipe/mspipe/plugins"
)

// testPlugin is the path of plugins/host's test plugin, built once by
// TestMain. It is written only there, before any test runs.
var testPlugin string

func TestMain(m *testing.M) {
	gobuild.Main(m, "../host/testdata/testplugin", "mspipe-stage-test-plugin", &testPlugin)
}

// declaringStage is a built-in that only says what it declares: the
// catalog describes and checks stages, it never runs a built-in itself.
type declaringStage struct {
	desc plugins.Descriptor
}

func (s *declaringStage) Describe(context.Context) (plugins.Descriptor, error) { return s.desc, nil }

func (s *declaringStage) Validate(context.Context, plugins.ValidateRequest) ([]plugins.Problem, error) {
	return nil, nil
}

func (s *declaringStage) Run(context.Context, plugins.RunRequest, func(plugins.Event)) (map[string]any, error) {
	return nil, fmt.Errorf("stage %s: the catalog does not run built-ins in its own process", s.desc.Name)
}

// writeFile writes content to path with mode, making its directory.
func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// copyFile copies the executable from to the path to.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(data), 0o755)
}
