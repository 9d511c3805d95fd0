package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const injectionSpec = `version: 1
name: injection
params:
  who: {type: string, default: world}
stages:
  greet:
    uses: exec
    with:
      command: "printf '%s\n' hello ${{ params.who }} \"in quotes ${{ params.who }}\" 'in single ${{ params.who }}' > greeting.txt"
`

// A param value substituted into an exec command reaches the shell as
// data: before, -p 'who=a; touch x' ran touch.
func TestExpressionValuesAreNotShellSyntax(t *testing.T) {
	w := newWorkspace(t)
	w.write("inj.yaml", injectionSpec)
	for _, who := range []string{"a; touch PWNED", "$(touch PWNED)", "`touch PWNED`", "it's \"quoted\"", "two\nlines"} {
		r := w.run("run", "inj.yaml", "--no-cache", "-p", "who="+who)
		if r.code != 0 {
			t.Fatalf("who=%q: exit %d\n%s", who, r.code, r.stderr)
		}
		id := strings.TrimSpace(r.stdout)
		matches, _ := filepath.Glob(filepath.Join(w.dir, "runs", id, "stages", "greet", "**", "PWNED"))
		if _, err := os.Stat(filepath.Join(w.dir, "runs", id, "stages", "greet", "PWNED")); err == nil || len(matches) > 0 {
			t.Errorf("who=%q: the value ran a command", who)
		}
		got, err := os.ReadFile(filepath.Join(w.dir, "runs", id, "stages", "greet", "greeting.txt"))
		if err != nil {
			t.Fatal(err)
		}
		want := "hello\n" + who + "\nin quotes " + who + "\nin single " + who + "\n"
		if string(got) != want {
			t.Errorf("who=%q: printed %q, want %q", who, got, want)
		}
	}
}
