package diag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

// results covers every case a report prints: a valid file with a warning,
// an invalid one, and one that could not be read.
func results() []Result {
	return []Result{
		{File: "ok.yaml", Diagnostics: List{{File: "ok.yaml", Line: 2, Column: 5, Severity: Warning, Message: "placeholder"}}},
		{File: "bad.yaml", Diagnostics: List{
			{File: "bad.yaml", Line: 3, Column: 20, Code: "yaml-syntax", Message: "50% done\nnext"},
			{File: "table.json", Line: 7, Column: 23, Message: "3 devices"},
		}},
		{File: "gone.yaml", Err: fmt.Errorf("read spec: %w", &fs.PathError{Op: "open", Path: "gone.yaml", Err: fs.ErrNotExist})},
	}
}

func report(t *testing.T, f Format, rs []Result) (stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if err := (Reporter{Format: f, One: "file", Many: "files"}).Report(&out, &errb, rs); err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String()
}

func TestReportText(t *testing.T) {
	stdout, stderr := report(t, Text, results())
	want := "ok.yaml:2:5: warning: placeholder\n" +
		"bad.yaml:3:20: error: 50% done\nnext\n" +
		"table.json:7:23: error: 3 devices\n" +
		"gone.yaml: error: open: file does not exist\n" // the path is printed once, in front
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	if want := "3 files checked: 1 unreadable, 1 invalid, 2 errors, 1 warning\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
}

func TestReportGitHub(t *testing.T) {
	stdout, stderr := report(t, GitHub, results())
	want := "::warning file=ok.yaml,line=2,col=5::placeholder\n" +
		"::error file=bad.yaml,line=3,col=20::50%25 done%0Anext\n" +
		"::error file=table.json,line=7,col=23::3 devices\n" +
		"::error file=gone.yaml::read spec: open gone.yaml: file does not exist\n"
	if stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	if !strings.HasPrefix(stderr, "3 files checked:") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr %q, want the summary line", stderr)
	}
}

func TestGitHubAnnotationEscaping(t *testing.T) {
	got := GitHubAnnotation(Diagnostic{File: "a,b:c%.yaml", Line: 1, Column: 2, Message: "50% done\r\nnext: a,b"})
	want := "::error file=a%2Cb%3Ac%25.yaml,line=1,col=2::50%25 done%0D%0Anext: a,b"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestReportJSON(t *testing.T) {
	stdout, stderr := report(t, JSON, results())
	if stderr != "" {
		t.Errorf("json wrote %q on stderr", stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	// The shape `mspipe validate --format json` has always had, plus "code"
	// when a diagnostic has one; unknown line and col are left out.
	want := map[string]any{
		"valid": false,
		"files": []any{
			map[string]any{"file": "ok.yaml", "valid": true, "problems": []any{
				map[string]any{"file": "ok.yaml", "line": 2.0, "col": 5.0, "severity": "warning", "message": "placeholder"},
			}},
			map[string]any{"file": "bad.yaml", "valid": false, "problems": []any{
				map[string]any{"file": "bad.yaml", "line": 3.0, "col": 20.0, "severity": "error", "code": "yaml-syntax", "message": "50% done\nnext"},
				map[string]any{"file": "table.json", "line": 7.0, "col": 23.0, "severity": "error", "message": "3 devices"},
			}},
			map[string]any{"file": "gone.yaml", "valid": false, "problems": []any{
				map[string]any{"file": "gone.yaml", "severity": "error", "message": "read spec: open gone.yaml: file does not exist"},
			}},
		},
	}
	if g, w := fmt.Sprint(got), fmt.Sprint(want); g != w {
		t.Errorf("json report:\n%s\nwant:\n%s", g, w)
	}

	stdout, _ = report(t, JSON, results()[:1])
	if !strings.HasPrefix(stdout, "{\n  \"valid\": true,\n  \"files\": [\n") {
		t.Errorf("valid report starts %q", stdout)
	}
}

func TestSummary(t *testing.T) {
	warn := Diagnostic{Severity: Warning, Message: "w"}
	bad := Diagnostic{Message: "e"}
	unreadable := Result{File: "x", Err: errors.New("is a directory")}
	tests := []struct {
		results []Result
		want    string
	}{
		{[]Result{{File: "a"}}, "1 rank table checked: all valid"},
		{[]Result{{File: "a"}, {File: "b", Diagnostics: List{warn, warn}}}, "2 rank tables checked: all valid, 2 warnings"},
		{[]Result{{File: "a", Diagnostics: List{bad, warn}}}, "1 rank table checked: 1 invalid, 1 error, 1 warning"},
		{[]Result{unreadable}, "1 rank table checked: 1 unreadable"},
		{[]Result{unreadable, {File: "b", Diagnostics: List{bad, bad}}, {File: "c"}}, "3 rank tables checked: 1 unreadable, 1 invalid, 2 errors"},
	}
	r := Reporter{Format: Text, One: "rank table", Many: "rank tables"}
	for _, tt := range tests {
		if got := r.Summary(tt.results); got != tt.want {
			t.Errorf("Summary = %q, want %q", got, tt.want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for _, s := range []string{"text", "github", "json"} {
		if f, err := ParseFormat(s); err != nil || string(f) != s {
			t.Errorf("ParseFormat(%q) = %q, %v", s, f, err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil || err.Error() != `unknown format "xml" (text, json or github)` {
		t.Errorf("ParseFormat(xml) error = %v", err)
	}
	if err := (Reporter{Format: "xml"}).Report(&bytes.Buffer{}, &bytes.Buffer{}, nil); err == nil {
		t.Error("Report with an unknown format succeeded")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestReportWriteError(t *testing.T) {
	err := (Reporter{Format: Text, One: "file", Many: "files"}).Report(failingWriter{}, &bytes.Buffer{}, results())
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Report to a failing writer: %v", err)
	}
}
