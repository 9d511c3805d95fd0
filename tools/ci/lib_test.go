// Package ci tests the helpers of the CI script, .ci/run (in .ci/lib.sh):
// an install step that fails must say why instead of exiting silently.
package ci

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runLib runs script in bash with .ci/lib.sh sourced and set -e, with
// fake npm and apt-get first on PATH; it returns the combined output and
// the exit status.
func runLib(t *testing.T, script string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	lib, err := filepath.Abs(filepath.Join("..", "..", ".ci", "lib.sh"))
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	fake := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The registry is unreachable, as on a machine without network.
	fake("npm", `echo "npm error code ECONNREFUSED"; echo "npm error FetchError: request to https://registry.npmjs.org/ajv-cli failed" >&2; exit 1`)
	fake("apt-get", `if [ "$1" = update ]; then echo "Hit:1 http://deb.debian.org/debian"; exit 0; fi; echo "E: Unable to locate package $4" >&2; exit 100`)
	cmd := exec.Command(bash, "-c", "set -euo pipefail; source \"$LIB\"; "+script)
	cmd.Env = append(os.Environ(), "LIB="+lib, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatal(err)
		return "", 0
	}
}

// TestInstallFailuresSayWhy: with the npm registry unreachable, or a
// package apt cannot find, the step fails with the tool's exit status and
// prints what failed and the tool's own messages; nothing after it runs.
func TestInstallFailuresSayWhy(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		status       int
		want         []string
	}{
		{"npm", `install_ajv "$TMPDIR/ajv"; echo after`, 1, []string{
			".ci/run: npm install ajv-cli failed (exit status 1): npm install --prefix",
			"npm error code ECONNREFUSED", "request to https://registry.npmjs.org/ajv-cli failed"}},
		{"apt", `install_packages protobuf-compiler slurm-wlmm; echo after`, 100, []string{
			".ci/run: installing protobuf-compiler slurm-wlmm failed (exit status 100)",
			"E: Unable to locate package"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, status := runLib(t, tc.script)
			if status != tc.status {
				t.Errorf("exit status %d, want %d; output:\n%s", status, tc.status, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "after") {
				t.Errorf("the script went on after the failed step:\n%s", out)
			}
		})
	}
}

// TestQuietStepStaysQuiet: a step that passes prints nothing of its own.
func TestQuietStepStaysQuiet(t *testing.T) {
	out, status := runLib(t, `quietly "a step" sh -c 'echo noise; echo more >&2'; echo done`)
	if status != 0 || out != "done\n" {
		t.Errorf("status %d, output %q; want 0 and only \"done\"", status, out)
	}
}
