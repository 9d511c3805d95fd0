package spec

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mspipe/mspipe/internal/diag"
)

// ErrTooComplex is returned when resolving a spec that Parse found nested
// too deep or expanding to too many nodes through aliases.
var ErrTooComplex = errors.New("spec too complex")

// ErrUnchecked is what a Catalog's Stage wraps when a stage exists but what
// it declares is not known, typically a plugin binary the catalog may not
// start. Validate then reports the error's text as a warning at the stage's
// uses, does not check its with, and lets expressions read any output of it
// (as any), since the outputs' names and types are unknown.
var ErrUnchecked = errors.New("with: not checked")

// Codes of the diagnostics after which a file is not read as a spec at all,
// so semantic checks are not worth running; see Decoded.
const (
	CodeTooLarge   = "spec-too-large"   // the file is over MaxFileSize
	CodeNotText    = "spec-not-text"    // NUL bytes or invalid UTF-8
	CodeEmpty      = "spec-empty"       // no YAML document, or null
	CodeSyntax     = "yaml-syntax"      // the YAML parser failed
	CodeTooComplex = "spec-too-complex" // nested too deep, or an alias bomb
)

// Decoded reports whether a file with these diagnostics from Parse or Load
// was read as YAML at all, so that Validate has something to check.
func Decoded(problems diag.List) bool {
	for _, d := range problems {
		switch d.Code {
		case CodeTooLarge, CodeNotText, CodeEmpty, CodeSyntax, CodeTooComplex:
			return false
		}
	}
	return true
}

// Pos is a position in a spec file. Line and Col are 1-based; 0 means unknown.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	return p.diagnostic(diag.Error, "", "").Where()
}

func (p Pos) diagnostic(sev diag.Severity, code, msg string) diag.Diagnostic {
	return diag.Diagnostic{File: p.File, Line: p.Line, Column: p.Col, Severity: sev, Code: code, Message: msg}
}

// problems collects the diagnostics of one pass over a spec.
type problems diag.List

func (l *problems) add(pos Pos, format string, args ...any) {
	*l = append(*l, pos.diagnostic(diag.Error, "", fmt.Sprintf(format, args...)))
}

func (l *problems) warn(pos Pos, format string, args ...any) {
	*l = append(*l, pos.diagnostic(diag.Warning, "", fmt.Sprintf(format, args...)))
}

func (l *problems) addCode(pos Pos, code, format string, args ...any) {
	*l = append(*l, pos.diagnostic(diag.Error, code, fmt.Sprintf(format, args...)))
}

// quoteList formats names for messages: "a", "b" and "c".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
