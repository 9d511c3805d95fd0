package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMain builds the example plugin that examples/custom-plugin.yaml uses
// and puts it on MSPIPE_PLUGIN_PATH, as a user who follows the README has.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mspipe-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "mspipe-stage-cifar-augment"), "../../../../examples/plugins/cifar-augment")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build example plugin: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	os.Setenv("MSPIPE_PLUGIN_PATH", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
