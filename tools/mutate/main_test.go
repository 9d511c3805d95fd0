package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	list := `# comment
## first
in: pkg
test: ./pkg ./other
run: TestA|TestB
- a  :=  1
+ a := 2

## second
in: pkg/file.go
test: ./pkg
-   x++
+   x--
`
	muts, err := parseList(strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	if len(muts) != 2 {
		t.Fatalf("%d mutations, want 2", len(muts))
	}
	m := muts[0]
	if m.Name != "first" || m.In != "pkg" || strings.Join(m.Tests, ",") != "./pkg,./other" || m.Run != "TestA|TestB" || m.From != "a  :=  1" || m.To != "a := 2" || m.Line != 2 {
		t.Errorf("first: %+v", m)
	}
	if m := muts[1]; m.In != "pkg/file.go" || m.From != "x++" || m.To != "x--" || m.Line != 9 {
		t.Errorf("second: %+v", m)
	}

	for _, tc := range []struct{ list, want string }{
		{"## a\ntest: ./x\n- 1\n+ 2\n", `line 1: "a" has no in:`},
		{"## a\nin: x\n- 1\n+ 2\n", `line 1: "a" has no test:`},
		{"## a\nin: x\ntest: ./x\n- 1\n", `line 1: "a" needs a - line and a + line`},
		{"## a\nin: x\ntest: ./x\n- 1\n+ 1\n", `line 1: "a" changes nothing`},
		{"## a\nin: x\ntest: ./x\n- 1\n+ 2\n## a\n", `line 6: duplicate mutation "a"`},
		{"in: x\n", `line 1: "in: x" before the first ## entry`},
		{"## a\nin: x\ntest: ./x\n- 1\n- 2\n", `line 5: unexpected "- 2" (entries have in:, test:, run:, one - line and one + line)`},
	} {
		if _, err := parseList(strings.NewReader(tc.list)); err == nil || err.Error() != tc.want {
			t.Errorf("%q: %v, want %q", tc.list, err, tc.want)
		}
	}
}

func TestLocate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "package p\n\nfunc f(x int) int {\n\tif x > 0 && x < 10 {\n\t\treturn 1\n\t}\n\treturn 0\n}\n")
	write("b.go", "package p\n\nvar twice = 1\nvar twiceAgain = 1\n")
	write("a_test.go", "package p\n\n// if x > 0 && x < 10 {\n")

	// Spacing inside the snippet need not match; test files are not searched.
	file, line, original, mutated, err := locate(Mutation{In: dir, From: "x > 0   &&   x < 10", To: "x >= 0 && x < 10"})
	if err != nil {
		t.Fatal(err)
	}
	if file != filepath.Join(dir, "a.go") || line != 4 || !strings.HasPrefix(string(original), "package p") {
		t.Errorf("found %s:%d", file, line)
	}
	if want := "package p\n\nfunc f(x int) int {\n\tif x >= 0 && x < 10 {\n\t\treturn 1\n\t}\n\treturn 0\n}\n"; string(mutated) != want {
		t.Errorf("mutated:\n%s\nwant:\n%s", mutated, want)
	}
	if _, _, _, _, err := locate(Mutation{In: filepath.Join(dir, "a.go"), From: "return 0", To: "return 2"}); err != nil {
		t.Errorf("a file as in: %v", err)
	}

	for _, tc := range []struct {
		from, want string
	}{
		{"x > 1", `stale: "x > 1" not found in ` + dir},
		{"= 1", `stale: "= 1" found 2 times (` + filepath.Join(dir, "b.go") + ":3, " + filepath.Join(dir, "b.go") + ":4)"},
		{"return", `stale: "return" found 2 times (` + filepath.Join(dir, "a.go") + ":5, " + filepath.Join(dir, "a.go") + ":7)"},
	} {
		_, _, _, _, err := locate(Mutation{In: dir, From: tc.from, To: "y"})
		if !errors.Is(err, errStale) || err.Error() != tc.want {
			t.Errorf("%q: %v, want %q", tc.from, err, tc.want)
		}
	}
}

// TestRunRestoresAndJudges runs the tool on a small module: one mutant its
// test kills, one it misses, one that does not compile and one stale entry;
// the source file is byte-identical afterwards.
func TestRunRestoresAndJudges(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test four times")
	}
	dir := t.TempDir()
	src := "package p\n\n// Abs returns |x|.\nfunc Abs(x int) int {\n\tif x < 0 {\n\t\treturn -x\n\t}\n\treturn x\n}\n"
	files := map[string]string{
		"go.mod":    "module example.com/p\n\ngo 1.26\n",
		"p.go":      src,
		"p_test.go": "package p\n\nimport \"testing\"\n\nfunc TestAbs(t *testing.T) {\n\tif Abs(-2) != 2 || Abs(3) != 3 {\n\t\tt.Fatal(Abs(-2), Abs(3))\n\t}\n}\n",
		"mutations": "## negation lost\nin: .\ntest: ./...\n- return -x\n+ return x\n\n" +
			"## boundary moved\nin: p.go\ntest: ./...\n- if x < 0 {\n+ if x <= 0 {\n\n" +
			"## does not compile\nin: .\ntest: ./...\n- return x\n+ return y\n\n" +
			"## gone\nin: .\ntest: ./...\n- x * 2\n+ x * 3\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-list", "mutations", "-timeout", "2m"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"| 1 | killed | negation lost | p.go:6 | TestAbs |",
		"| 2 | survived | boundary moved | p.go:5 |  |",
		"| 3 | invalid | does not compile | p.go:8 | ",
		`| 4 | stale | gone |  | stale: "x * 2" not found in . |`,
		"killed 1 of 2 (0 by timeout), survived 1; invalid 1, stale 1, baseline failed 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "p.go")); err != nil || string(b) != src {
		t.Errorf("p.go not restored: %q %v", b, err)
	}
}
