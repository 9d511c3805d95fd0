// Package ci tests the helpers of the CI script, .ci/run (in .ci/lib.sh):
// an install step that fails must say why instead of exiting silently, and
// a fuzz target runs again only after Go's own fuzztime race.
package ci

import (
	"errors"
	"fmt"
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

// TestFuzzTargetRunsAgainOnlyAfterGosDeadlineRace: a fuzz target that
// Go 1.26's coordinator stops with a bare "context deadline exceeded"
// (golang/go#75804) runs once more; a second such stop, and a real
// failure (a failing input written), fail at once. The fake go prints the
// runs' outputs in turn, as `go test -fuzz` prints them.
func TestFuzzTargetRunsAgainOnlyAfterGosDeadlineRace(t *testing.T) {
	const (
		race = `echo "fuzz: elapsed: 15s, execs: 256704 (0/sec), new interesting: 8 (total: 310)"; echo "--- FAIL: FuzzX (15.17s)"; echo "    context deadline exceeded"; echo FAIL; exit 1`
		pass = `echo "fuzz: elapsed: 15s, execs: 256908 (0/sec)"; echo PASS; echo "ok  	example/pkg	15.174s"; exit 0`
		// A real crash names the input it wrote; its message may mention
		// a deadline too (a target that hangs on the input).
		crash = `echo "--- FAIL: FuzzX (3.02s)"; echo "    fuzzing process hung or terminated unexpectedly: context deadline exceeded"; echo "    Failing input written to testdata/fuzz/FuzzX/abc"; echo FAIL; exit 1`
	)
	for _, tc := range []struct {
		name   string
		runs   []string
		status int
		calls  int
		note   bool
	}{
		{"race, then pass", []string{race, pass}, 0, 2, true},
		{"race twice", []string{race, race}, 1, 2, true},
		{"crash", []string{crash, pass}, 1, 1, false},
		{"pass", []string{pass}, 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			script := "n=$(cat \"$CALLS\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$CALLS\"\ncase $n in\n"
			for i, run := range tc.runs {
				script += fmt.Sprintf("%d) %s ;;\n", i+1, run)
			}
			script += "*) echo unexpected call >&2; exit 9 ;;\nesac"
			calls, fakeGo := filepath.Join(dir, "calls"), filepath.Join(dir, "go")
			if err := os.WriteFile(fakeGo, []byte(script+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, status := runLib(t, fmt.Sprintf("export CALLS='%s'; go() { sh '%s' \"$@\"; }; fuzz_target FuzzX ./pkg 15s; echo after", calls, fakeGo))
			if status != tc.status {
				t.Errorf("exit status %d, want %d; output:\n%s", status, tc.status, out)
			}
			n, err := os.ReadFile(calls)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(n)); got != fmt.Sprint(tc.calls) {
				t.Errorf("go ran %s times, want %d; output:\n%s", got, tc.calls, out)
			}
			if got := strings.Contains(out, "golang/go#75804"); got != tc.note {
				t.Errorf("note of the race printed: %v, want %v; output:\n%s", got, tc.note, out)
			}
			if after := strings.Contains(out, "after"); after != (tc.status == 0) {
				t.Errorf("the script went on after the target: %v; output:\n%s", after, out)
			}
		})
	}
}
