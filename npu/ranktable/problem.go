package ranktable

import (
	"fmt"
	"slices"
	"strings"
)

// Pos is a place in a rank table file. Line and Col are 1-based; Col counts
// bytes, as Go tools do. The zero Pos means "no position" (for tables built
// in memory, such as the output of Generate).
type Pos struct {
	Offset int // byte offset from the start of the file
	Line   int
	Col    int
}

// IsValid reports whether p names a place in a file.
func (p Pos) IsValid() bool { return p.Line > 0 }

// String returns "line:col", or "-" for the zero Pos.
func (p Pos) String() string {
	if !p.IsValid() {
		return "-"
	}
	return fmt.Sprintf("%d:%d", p.Line, p.Col)
}

// Severity says whether a problem makes a rank table invalid.
type Severity uint8

// Severities. Only errors make a table invalid; warnings point at things to
// fix before a real cluster run (placeholder server ids, unchecked order).
const (
	SeverityError Severity = iota
	SeverityWarning
)

func (s Severity) String() string {
	if s == SeverityWarning {
		return "warning"
	}
	return "error"
}

// Problem is one finding about a rank table.
type Problem struct {
	File     string   // file name as given to Parse or Load
	Pos      Pos      // where the problem is; zero for in-memory tables
	Path     string   // JSON path such as server_list[1].device[3].rank_id; "" for the whole file
	Severity Severity // error or warning
	Msg      string   // lower-case, no trailing period
}

// String formats p as "file:line:col: severity: msg", the form editors and
// compilers use. Without a position (tables built in memory) the JSON path
// stands in: "file: severity: path: msg", the file left out when unnamed.
func (p Problem) String() string {
	if p.Pos.IsValid() {
		return fmt.Sprintf("%s:%d:%d: %s: %s", p.File, p.Pos.Line, p.Pos.Col, p.Severity, p.Msg)
	}
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File + ": ")
	}
	b.WriteString(p.Severity.String() + ": ")
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error makes a Problem usable as an error.
func (p Problem) Error() string { return p.String() }

// Problems is a list of findings, sorted by position once returned by this
// package.
type Problems []Problem

// Count returns the number of errors and warnings.
func (ps Problems) Count() (errs, warnings int) {
	for _, p := range ps {
		if p.Severity == SeverityError {
			errs++
		} else {
			warnings++
		}
	}
	return errs, warnings
}

// HasErrors reports whether any problem is an error.
func (ps Problems) HasErrors() bool {
	errs, _ := ps.Count()
	return errs > 0
}

// Err returns nil when there is no error-level problem, otherwise an error
// that wraps ErrInvalid and every error-level Problem.
func (ps Problems) Err() error {
	var errs Problems
	for _, p := range ps {
		if p.Severity == SeverityError {
			errs = append(errs, p)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &InvalidError{Problems: errs}
}

// sort orders problems by file position; problems at the same place keep the
// order in which they were found, so output is deterministic.
func (ps Problems) sort() {
	slices.SortStableFunc(ps, func(a, b Problem) int { return a.Pos.Offset - b.Pos.Offset })
}

// InvalidError is the error returned by Problems.Err.
type InvalidError struct {
	Problems Problems // error-level problems only, sorted by position
}

// Error prints the first problem and how many more there are, like
// go/scanner.ErrorList.
func (e *InvalidError) Error() string {
	var b strings.Builder
	b.WriteString(e.Problems[0].String())
	if n := len(e.Problems) - 1; n == 1 {
		b.WriteString(" (and 1 more error)")
	} else if n > 1 {
		fmt.Fprintf(&b, " (and %d more errors)", n)
	}
	return b.String()
}

// Unwrap exposes ErrInvalid and every problem to errors.Is and errors.As.
func (e *InvalidError) Unwrap() []error {
	errs := make([]error, 0, len(e.Problems)+1)
	errs = append(errs, ErrInvalid)
	for _, p := range e.Problems {
		errs = append(errs, p)
	}
	return errs
}
