package tensor

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestAsmIsGenerated runs the generator (internal/asmgen) into a scratch
// directory and requires every committed *_amd64.s file of the package to
// be one it writes, byte for byte, so no kernel is hand-edited or drifts
// from its generator.
func TestAsmIsGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Go toolchain")
	}
	dir := t.TempDir()
	if msg, err := exec.Command("go", "run", "./internal/asmgen", dir).CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/asmgen: %v\n%s", err, msg)
	}
	generated, err := filepath.Glob(filepath.Join(dir, "*.s"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := filepath.Glob("*.s")
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range generated {
		generated[i] = filepath.Base(g)
	}
	if !slices.Equal(generated, committed) {
		t.Fatalf("assembly files %v, generator writes %v", committed, generated)
	}
	for _, name := range committed {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs from what internal/asmgen writes: run go generate ./npu/tensor", name)
			}
		})
	}
}
