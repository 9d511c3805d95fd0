// Package gobuild is the TestMain of packages whose tests start a real
// binary built from this module: it builds the binary once into a fresh
// temporary directory, runs the tests and removes the directory.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main builds the main package pkg (a path relative to the test's
// package directory) as name, stores the binary's path in *bin, runs m and
// exits with its code. A failed build exits 1 with the compiler's output.
func Main(m *testing.M, pkg, name string, bin *string) {
	dir, err := os.MkdirTemp("", "mspipe-gobuild-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", *bin, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
