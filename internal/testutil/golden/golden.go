// Package golden compares what a test produced with a file under testdata
// and, when the tests run with -update, rewrites the file instead: the one
// golden-file helper and the one -update flag of the tree's tests.
//
//	func TestListing(t *testing.T) {
//		golden.Check(t, filepath.Join("testdata", "listing.golden"), listing())
//	}
//
// go test ./pkg -update rewrites every golden file its tests check; read
// the diff before committing it. A test package that imports golden must
// not define its own -update flag.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/mspipe/mspipe/internal/atomicfile"
)

var update = flag.Bool("update", false, "rewrite the golden files with the tests' output")

// Update reports whether the tests run with -update, for a test that
// writes more than golden files (inputs it generates, say).
func Update() bool { return *update }

// Check compares got with the file at path and fails the test when they
// differ, quoting both. With -update it writes got to path instead
// (making its directory) and passes.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := atomicfile.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file: %v (go test -update writes it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it; read the diff first):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
