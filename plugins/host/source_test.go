package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPluginSource(t *testing.T) {
	specDir := t.TempDir()
	writeFile(t, filepath.Join(specDir, "plugins", "augment", "main.go"), "// Command augment.\n\n/* a\nblock */\npackage main\n")
	writeFile(t, filepath.Join(specDir, "examples", "plugins", "shuffle", "main.go"), "package main // the stage\n")
	writeFile(t, filepath.Join(specDir, "plugins", "acme", "tag", "tag.go"), "/* one line */ package main\n")
	writeFile(t, filepath.Join(specDir, "plugins", "sdk", "sdk.go"), "// Package sdk is a library.\npackage sdk\n")
	writeFile(t, filepath.Join(specDir, "plugins", "testonly", "main_test.go"), "package main\n")
	writeFile(t, filepath.Join(specDir, "plugins", "nogo", "README.md"), "package main\n")
	writeFile(t, filepath.Join(specDir, "plugins", "late", "main.go"), "import \"fmt\"\npackage main\n")

	for _, tc := range []struct {
		name, want string
	}{
		{"augment", filepath.Join(specDir, "plugins", "augment")},
		{"shuffle", filepath.Join(specDir, "examples", "plugins", "shuffle")},
		{"acme/tag", filepath.Join(specDir, "plugins", "acme", "tag")},
		{"sdk", ""},      // a library, not a plugin
		{"testonly", ""}, // only a test file says main
		{"nogo", ""},     // no Go file
		{"late", ""},     // no package clause before other code
		{"augmnet", ""},  // a typo
		{"../plugins/augment", ""},
		{"Augment", ""}, // not a valid stage name
	} {
		got, ok := PluginSource(specDir, tc.name)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("PluginSource(%q) = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

func TestBuildCommand(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"cifar-augment", filepath.Join("examples", "plugins", "cifar-augment"),
			"go build -o plugins/mspipe-stage-cifar-augment ./examples/plugins/cifar-augment"},
		{"acme/tag", filepath.Join(wd, "plugins", "acme", "tag"),
			"go build -o plugins/mspipe-stage-acme-tag ./plugins/acme/tag"},
		{"up", filepath.Join(filepath.Dir(wd), "up"),
			"go build -o plugins/mspipe-stage-up " + filepath.ToSlash(filepath.Join(filepath.Dir(wd), "up"))},
	} {
		if got := BuildCommand(tc.name, tc.src); got != tc.want {
			t.Errorf("BuildCommand(%q, %q) = %q, want %q", tc.name, tc.src, got, tc.want)
		}
	}
}

// TestBuildCommandOutsideTheModule: from a directory outside the module
// that holds the source, the command builds inside the module (go -C) and
// writes to this directory's plugins/, and it works when run.
func TestBuildCommandOutsideTheModule(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(filepath.Dir(filepath.Dir(wd)), "examples", "plugins", "cifar-augment")
	root := filepath.Dir(filepath.Dir(wd))
	elsewhere := t.TempDir()
	t.Chdir(elsewhere)
	got := BuildCommand("cifar-augment", src)
	want := "go -C " + root + " build -o " + filepath.Join(elsewhere, "plugins", "mspipe-stage-cifar-augment") + " ./examples/plugins/cifar-augment"
	if got != want {
		t.Fatalf("BuildCommand = %q, want %q", got, want)
	}
	if testing.Short() {
		return
	}
	cmd := exec.Command("sh", "-c", got)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", got, err, out)
	}
	if st, err := os.Stat(filepath.Join(elsewhere, "plugins", "mspipe-stage-cifar-augment")); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("no executable plugin after %s: %v", got, err)
	}
}
