package diag

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Severity says whether a diagnostic makes a file invalid. The zero value is
// Error.
type Severity uint8

const (
	// Error makes the file invalid.
	Error Severity = iota
	// Warning points at something to fix; the file stays valid.
	Warning
)

func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// Diagnostic is one problem found in a file. Line and Column are 1-based;
// 0 means unknown. Column counts what the file's parser counts: characters
// in YAML (yaml.v3), bytes in JSON (Locator), as Go tools do.
type Diagnostic struct {
	File     string
	Line     int
	Column   int
	Severity Severity
	// Code names the kind of problem for programs that act on it, such as
	// "yaml-syntax"; "" when no program needs to tell it apart.
	Code    string
	Message string // lower-case, no trailing period
}

// String formats d as "file:line:col: severity: message". Unknown parts of
// the position are left out, and so is the position itself when it is empty.
func (d Diagnostic) String() string {
	var b strings.Builder
	if where := d.Where(); where != "" {
		b.WriteString(where)
		b.WriteString(": ")
	}
	b.WriteString(d.Severity.String())
	b.WriteString(": ")
	b.WriteString(d.Message)
	return b.String()
}

// Where formats the position alone: "file:line:col", "file:line", "file"
// or "".
func (d Diagnostic) Where() string {
	switch {
	case d.Line <= 0:
		return d.File
	case d.Column <= 0:
		return d.File + ":" + strconv.Itoa(d.Line)
	}
	return fmt.Sprintf("%s:%d:%d", d.File, d.Line, d.Column)
}

// Error makes a Diagnostic usable as an error.
func (d Diagnostic) Error() string { return d.String() }

// List collects the diagnostics of one or more files.
type List []Diagnostic

// Sort orders the list by file, line and column; diagnostics at the same
// place keep the order in which they were found, so output is deterministic.
func (l List) Sort() {
	slices.SortStableFunc(l, func(a, b Diagnostic) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

// Count returns the number of errors and of warnings.
func (l List) Count() (errs, warnings int) {
	for _, d := range l {
		if d.Severity == Warning {
			warnings++
		} else {
			errs++
		}
	}
	return errs, warnings
}

// HasErrors reports whether any diagnostic is an error.
func (l List) HasErrors() bool {
	errs, _ := l.Count()
	return errs > 0
}

// Errors returns the diagnostics that are not warnings.
func (l List) Errors() List {
	var out List
	for _, d := range l {
		if d.Severity != Warning {
			out = append(out, d)
		}
	}
	return out
}

// Err returns nil when the list holds no errors (warnings allowed), else the
// errors as a List.
func (l List) Err() error {
	if errs := l.Errors(); len(errs) > 0 {
		return errs
	}
	return nil
}

// Error prints the first diagnostic and how many more there are, like
// go/scanner.ErrorList.
func (l List) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].String()
	case 2:
		return l[0].String() + " (and 1 more error)"
	}
	return fmt.Sprintf("%s (and %d more errors)", l[0], len(l)-1)
}

// Unwrap lets errors.As see every diagnostic.
func (l List) Unwrap() []error {
	out := make([]error, len(l))
	for i, d := range l {
		out[i] = d
	}
	return out
}
