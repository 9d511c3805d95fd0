package spec

import (
	"errors"
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
				script, env, rerr := shellRefs(tmpl, []any{v}, &next)
				if rerr != nil {
					t.Fatal(rerr)
				}
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
	script, env, rerr := shellRefs(tmpl, []any{6, 7}, &next)
	if rerr != nil {
		t.Fatal(rerr)
	}
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

// posixShells are the shells a /bin/sh may be: dash, and bash (run in
// its POSIX mode, as it is when installed as /bin/sh). A missing one is
// skipped with the reason.
func posixShells(t *testing.T) map[string][]string {
	t.Helper()
	shells := map[string][]string{}
	for name, args := range map[string][]string{"dash": {"-c"}, "bash": {"--posix", "-c"}} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Logf("%s not installed: not tested as /bin/sh", name)
			continue
		}
		shells[name] = append([]string{path}, args...)
	}
	if len(shells) == 0 {
		t.Skip("neither dash nor bash is installed")
	}
	return shells
}

// runScript runs a rewritten script under sh in a fresh directory and
// reports its output and whether it created PWNED.
func runScript(t *testing.T, sh []string, script string, env map[string]string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(sh[0], append(sh[1:], script)...)
	cmd.Dir = dir
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: script %q: %v\n%s", sh[0], script, err, out)
	}
	_, pwned := os.Stat(filepath.Join(dir, "PWNED"))
	return string(out), pwned == nil
}

// TestHeredocValuesArriveUnchanged: in the body of an unquoted
// here-document (<<EOF, <<-EOF) a value arrives exactly, quotes and all,
// and runs nothing; after the body, quoting is as before.
func TestHeredocValuesArriveUnchanged(t *testing.T) {
	values := append([]string{`{"lr": 0.01}`, `it's "quoted"`, "EOF"}, hostile...)
	for name, sh := range posixShells(t) {
		for _, v := range values {
			for _, op := range []string{"<<EOF", "<< EOF", "<<-EOF", "<<\"E\"OF x"} {
				quoted := strings.Contains(op, `"`)
				tmpl := &Template{Parts: []TemplatePart{
					{Literal: "cat " + strings.TrimSuffix(op, " x") + "\nv=["}, {Expr: "params.v"}, {Literal: "]\nEOF\nprintf '%s|' "}, {Expr: "params.v"}}}
				next := 0
				script, env, rerr := shellRefs(tmpl, []any{v, v}, &next)
				if quoted {
					if rerr == nil || !errors.Is(rerr, ErrQuotedHeredoc) {
						t.Errorf("%s: expression in a quoted here-document: %v, want ErrQuotedHeredoc", op, rerr)
					}
					continue
				}
				if rerr != nil {
					t.Fatal(rerr)
				}
				out, pwned := runScript(t, sh, script, env)
				if want := "v=[" + v + "]\n" + v + "|"; out != want || pwned {
					t.Errorf("%s, %s, value %q: printed %q (ran a command: %v), want %q", name, op, v, out, pwned, want)
				}
			}
		}
	}
}

// TestArithmeticTakesIntegersOnly: a value in $(( )) must be an integer;
// under bash anything else could run commands (a[$(touch PWNED)]).
func TestArithmeticTakesIntegersOnly(t *testing.T) {
	for _, inHeredoc := range []bool{false, true} {
		before, after := "echo $(( ", " + 1 ))"
		if inHeredoc {
			before, after = "cat <<EOF\n$(( ", " + 1 ))\nEOF\n"
		}
		tmpl := &Template{Parts: []TemplatePart{{Literal: before}, {Expr: "params.n"}, {Literal: after}}}
		for _, v := range []any{"a[$(touch PWNED)]", "x", "1+1", "", 1.5, []any{1}} {
			next := 0
			if _, _, rerr := shellRefs(tmpl, []any{v}, &next); rerr == nil || !errors.Is(rerr, ErrNotInteger) {
				t.Errorf("heredoc %v: value %v in $(( )): %v, want ErrNotInteger", inHeredoc, v, rerr)
			}
		}
		for name, sh := range posixShells(t) {
			for v, want := range map[any]string{41: "42", -3: "-2", "7": "8"} {
				next := 0
				script, env, rerr := shellRefs(tmpl, []any{v}, &next)
				if rerr != nil {
					t.Fatalf("value %v: %v", v, rerr)
				}
				if out, _ := runScript(t, sh, script, env); out != want+"\n" {
					t.Errorf("%s: %q with %v printed %q, want %s", name, script, v, out, want)
				}
			}
		}
	}
}

// TestListsAndMapsFormatAsJSON: inside a string, a list or map prints as
// JSON, in a shell command too.
func TestListsAndMapsFormatAsJSON(t *testing.T) {
	list, mp := []any{1, "a b", 2.5}, map[string]any{"b": []any{true}, "a": "<&>"}
	if got := formatValue(list); got != `[1,"a b",2.5]` {
		t.Errorf("list: %s", got)
	}
	if got := formatValue(mp); got != `{"a":"<&>","b":[true]}` {
		t.Errorf("map: %s", got)
	}
	for name, sh := range posixShells(t) {
		tmpl := &Template{Parts: []TemplatePart{{Literal: "printf '%s|' "}, {Expr: "params.l"}, {Literal: " 'm="}, {Expr: "params.m"}, {Literal: "'"}}}
		next := 0
		script, env, rerr := shellRefs(tmpl, []any{list, mp}, &next)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if out, _ := runScript(t, sh, script, env); out != `[1,"a b",2.5]|m={"a":"<&>","b":[true]}|` {
			t.Errorf("%s: printed %q", name, out)
		}
	}
}
