package spec

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostile values: each would run `touch PWNED` if pasted into the script.
var hostile = []string{
	"a; touch PWNED",
	"$(touch PWNED)",
	"`touch PWNED`",
	"'; touch PWNED; '",
	`"; touch PWNED; "`,
	"x\ntouch PWNED",
	`\"; touch PWNED; \"`,
	"* ?",
	"",
}

// TestShellRefsKeepValuesAsData runs the rewritten scripts through /bin/sh
// and checks each prints the value unchanged and runs nothing it holds.
func TestShellRefsKeepValuesAsData(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// Literal text before and after the expression, and what the script
	// prints for value V.
	contexts := []struct {
		name, before, after string
		want                func(v string) string
	}{
		{"bare", `printf '%s|' `, ``, func(v string) string { return v + "|" }},
		{"double quotes", `printf '%s|' "pre `, ` post"`, func(v string) string { return "pre " + v + " post|" }},
		{"single quotes", `printf '%s|' 'pre `, ` post'`, func(v string) string { return "pre " + v + " post|" }},
		{"escaped quote before", `printf '%s|' "a\"b `, `"`, func(v string) string { return `a"b ` + v + "|" }},
		{"command substitution", `printf '%s|' "$(printf '%s' `, `)"`, func(v string) string { return strings.TrimRight(v, "\n") + "|" }},
		{"backticks", "printf '%s|' \"`printf '%s' ", "`\"", func(v string) string { return strings.TrimRight(v, "\n") + "|" }},
	}
	for _, c := range contexts {
		for _, v := range hostile {
			t.Run(c.name, func(t *testing.T) {
				tmpl := &Template{Parts: []TemplatePart{{Literal: c.before}, {Expr: "params.v"}, {Literal: c.after}}}
				next := 0
				script, env := shellRefs(tmpl, []any{v}, &next)
				dir := t.TempDir()
				cmd := exec.Command(sh, "-c", script)
				cmd.Dir = dir
				for k, val := range env {
					cmd.Env = append(cmd.Env, k+"="+val)
				}
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("script %q (value %q): %v\n%s", script, v, err, out)
				}
				if got := string(out); got != c.want(v) {
					t.Errorf("script %q with value %q printed %q, want %q", script, v, got, c.want(v))
				}
				if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
					t.Errorf("script %q with value %q ran a command from the value", script, v)
				}
			})
		}
	}
}

// In arithmetic a value stands unquoted: numbers work, and anything else
// is an arithmetic error, never a command.
func TestShellRefsArithmetic(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	tmpl := &Template{Parts: []TemplatePart{{Literal: "echo sum=$(( "}, {Expr: "a"}, {Literal: " + "}, {Expr: "b"}, {Literal: " ))"}}}
	next := 0
	script, env := shellRefs(tmpl, []any{6, 7}, &next)
	if script != "echo sum=$(( ${MSPIPE_EXPR_1} + ${MSPIPE_EXPR_2} ))" || next != 2 {
		t.Fatalf("script %q, next %d", script, next)
	}
	run := func(env map[string]string) (string, error) {
		cmd := exec.Command(sh, "-c", script)
		cmd.Dir = t.TempDir()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		if _, serr := os.Stat(filepath.Join(cmd.Dir, "PWNED")); serr == nil {
			t.Errorf("value ran a command: %q", env)
		}
		return string(out), err
	}
	if out, err := run(env); err != nil || out != "sum=13\n" {
		t.Fatalf("got %q, %v; want sum=13", out, err)
	}
	for _, v := range hostile {
		_, _ = run(map[string]string{"MSPIPE_EXPR_1": v, "MSPIPE_EXPR_2": "1"})
	}
}

func TestShellQuoteStateRefs(t *testing.T) {
	for text, want := range map[string]string{
		`echo `:                `"${V}"`,
		`echo "a `:             `${V}`,
		`echo 'a `:             `'"${V}"'`,
		`echo 'it''s `:         `'"${V}"'`,
		`echo "it's `:          `${V}`,
		`echo \" `:             `"${V}"`,
		`echo "$(cat "`:        `${V}`,
		`echo "$(cat `:         `"${V}"`,
		`echo $(( 1 + (2 * `:   `${V}`,
		`echo $(( 1 + (2) )) `: `"${V}"`,
		"echo `cat ":           `"${V}"`,
		`echo "$(f "a") `:      `${V}`,
		`x=$(echo "a)" ) `:     `"${V}"`,
		`echo 'a' "b" `:        `"${V}"`,
		`echo "\"" `:           `"${V}"`,
	} {
		var q shellQuoteState
		q.scan(text)
		if got := q.ref("V"); got != want {
			t.Errorf("after %q: ref %s, want %s", text, got, want)
		}
	}
}
