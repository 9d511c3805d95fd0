package diag

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// Format is how a Reporter prints results.
type Format string

// Formats.
const (
	// Text prints one diagnostic a line on stdout and a summary on stderr.
	Text Format = "text"
	// GitHub prints GitHub Actions workflow commands (::error file=...::msg)
	// on stdout, which annotate the pull request's diff, and the summary on
	// stderr.
	GitHub Format = "github"
	// JSON prints one report document on stdout and nothing on stderr.
	JSON Format = "json"
)

// ParseFormat accepts the value of a --format flag.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Text, GitHub, JSON:
		return f, nil
	}
	return "", fmt.Errorf("unknown format %q (text, json or github)", s)
}

// Result is what checking one file found.
type Result struct {
	File        string
	Diagnostics List
	Err         error // the file could not be read; Diagnostics is then empty
}

// Valid reports whether the file was read and has no errors.
func (r Result) Valid() bool { return r.Err == nil && !r.Diagnostics.HasErrors() }

// AllValid reports whether every result is valid.
func AllValid(results []Result) bool {
	for _, r := range results {
		if !r.Valid() {
			return false
		}
	}
	return true
}

// Reporter prints the results of checking files.
type Reporter struct {
	Format Format
	// One and Many name what was checked, for the summary line:
	// "file" and "files", "rank table" and "rank tables".
	One, Many string
}

// Report writes results to stdout and, except in JSON, the summary line to
// stderr.
func (r Reporter) Report(stdout, stderr io.Writer, results []Result) error {
	var out strings.Builder
	switch r.Format {
	case Text:
		writeText(&out, results)
	case GitHub:
		writeGitHub(&out, results)
	case JSON:
		if err := writeJSON(&out, results); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown format %q", r.Format)
	}
	if _, err := io.WriteString(stdout, out.String()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if r.Format == JSON {
		return nil
	}
	if _, err := io.WriteString(stderr, r.Summary(results)+"\n"); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// Summary is the last line of text and github output, such as
// "2 files checked: 1 unreadable, 1 invalid, 3 errors, 1 warning" or
// "1 file checked: all valid".
func (r Reporter) Summary(results []Result) string {
	var invalid, unreadable, errs, warns int
	for _, res := range results {
		switch {
		case res.Err != nil:
			unreadable++
		case !res.Valid():
			invalid++
		}
		e, w := res.Diagnostics.Count()
		errs += e
		warns += w
	}
	var parts []string
	if unreadable > 0 {
		parts = append(parts, fmt.Sprintf("%d unreadable", unreadable))
	}
	if invalid > 0 {
		parts = append(parts, fmt.Sprintf("%d invalid", invalid))
	}
	if errs > 0 {
		parts = append(parts, count(errs, "error", "errors"))
	}
	if unreadable+invalid == 0 {
		parts = append(parts, "all valid")
	}
	if warns > 0 {
		parts = append(parts, count(warns, "warning", "warnings"))
	}
	return fmt.Sprintf("%s checked: %s", count(len(results), r.One, r.Many), strings.Join(parts, ", "))
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func writeText(w *strings.Builder, results []Result) {
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(w, "%s: error: %s\n", r.File, readMessage(r.Err))
		}
		for _, d := range r.Diagnostics {
			w.WriteString(d.String())
			w.WriteByte('\n')
		}
	}
}

// readMessage is err's text without the file name, which the text format
// prints in front of it.
func readMessage(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

func writeGitHub(w *strings.Builder, results []Result) {
	for _, r := range results {
		if r.Err != nil {
			w.WriteString(GitHubAnnotation(Diagnostic{File: r.File, Message: r.Err.Error()}))
			w.WriteByte('\n')
		}
		for _, d := range r.Diagnostics {
			w.WriteString(GitHubAnnotation(d))
			w.WriteByte('\n')
		}
	}
}

// GitHubAnnotation formats d as a GitHub Actions workflow command, such as
// "::error file=a.yaml,line=3,col=20::message", escaping values as the
// Actions toolkit does.
func GitHubAnnotation(d Diagnostic) string {
	var b strings.Builder
	fmt.Fprintf(&b, "::%s file=%s", d.Severity, githubProperty.Replace(d.File))
	if d.Line > 0 {
		fmt.Fprintf(&b, ",line=%d", d.Line)
	}
	if d.Column > 0 {
		fmt.Fprintf(&b, ",col=%d", d.Column)
	}
	b.WriteString("::")
	b.WriteString(githubData.Replace(d.Message))
	return b.String()
}

var (
	githubData     = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	githubProperty = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
)

// The JSON report: {"valid": bool, "files": [{"file", "valid", "problems":
// [{"file", "line", "col", "severity", "code", "message"}]}]}. Unknown
// line, col and code are left out.
type (
	jsonReport struct {
		Valid bool       `json:"valid"`
		Files []jsonFile `json:"files"`
	}
	jsonFile struct {
		File     string        `json:"file"`
		Valid    bool          `json:"valid"`
		Problems []jsonProblem `json:"problems"`
	}
	jsonProblem struct {
		File     string `json:"file"`
		Line     int    `json:"line,omitempty"`
		Col      int    `json:"col,omitempty"`
		Severity string `json:"severity"`
		Code     string `json:"code,omitempty"`
		Message  string `json:"message"`
	}
)

func writeJSON(w *strings.Builder, results []Result) error {
	report := jsonReport{Valid: AllValid(results), Files: []jsonFile{}}
	for _, r := range results {
		f := jsonFile{File: r.File, Valid: r.Valid(), Problems: []jsonProblem{}}
		if r.Err != nil {
			f.Problems = append(f.Problems, jsonProblem{File: r.File, Severity: Error.String(), Message: r.Err.Error()})
		}
		for _, d := range r.Diagnostics {
			f.Problems = append(f.Problems, jsonProblem{
				File: d.File, Line: d.Line, Col: d.Column, Severity: d.Severity.String(), Code: d.Code, Message: d.Message,
			})
		}
		report.Files = append(report.Files, f)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(report); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return nil
}
