package spec

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors, tested with errors.Is on an Error or an ErrorList.
var (
	// ErrTooLarge is returned for a spec file above MaxFileSize.
	ErrTooLarge = errors.New("spec file too large")
	// ErrSyntax marks a YAML syntax error.
	ErrSyntax = errors.New("yaml syntax error")
	// ErrTooComplex marks a spec nested too deep or expanding to too many
	// nodes through aliases; nothing after it is checked.
	ErrTooComplex = errors.New("spec too complex")
)

// Pos is a position in a spec file. Line and Col are 1-based; 0 means unknown.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return p.File
	case p.Col == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Severity says whether a problem makes a spec invalid.
type Severity string

const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Error is one problem in a spec, printed as `file:line:col: error: message`.
type Error struct {
	Pos      Pos
	Severity Severity
	Msg      string
	Err      error // optional cause, for errors.Is
}

func (e *Error) Error() string {
	sev := e.Severity
	if sev == "" {
		sev = SeverityError
	}
	return fmt.Sprintf("%s: %s: %s", e.Pos, sev, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// IsWarning reports whether e does not make the spec invalid.
func (e *Error) IsWarning() bool { return e.Severity == SeverityWarning }

// ErrorList collects every problem found in one or more files.
type ErrorList []*Error

func (l *ErrorList) add(pos Pos, format string, args ...any) {
	*l = append(*l, &Error{Pos: pos, Severity: SeverityError, Msg: fmt.Sprintf(format, args...)})
}

func (l *ErrorList) warn(pos Pos, format string, args ...any) {
	*l = append(*l, &Error{Pos: pos, Severity: SeverityWarning, Msg: fmt.Sprintf(format, args...)})
}

// Sort orders the list by file, line and column, keeping the order of
// problems found at the same place.
func (l ErrorList) Sort() {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i].Pos, l[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// Errors returns the problems that are not warnings.
func (l ErrorList) Errors() ErrorList {
	var out ErrorList
	for _, e := range l {
		if !e.IsWarning() {
			out = append(out, e)
		}
	}
	return out
}

// Err returns nil when the list holds no errors (warnings allowed), else the
// list of errors itself as an error.
func (l ErrorList) Err() error {
	if errs := l.Errors(); len(errs) > 0 {
		return errs
	}
	return nil
}

func (l ErrorList) Error() string {
	switch len(l) {
	case 0:
		return "no errors"
	case 1:
		return l[0].Error()
	}
	return fmt.Sprintf("%s (and %d more errors)", l[0], len(l)-1)
}

// Unwrap lets errors.Is and errors.As see every collected error.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// suggest returns ` (did you mean "x"?)` for the candidate closest to name,
// or "" when none is close enough to be a plausible typo.
func suggest(name string, candidates []string) string {
	best, bestDist := "", len(name)/2+2
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(name), strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// quoteList formats names for messages: "a", "b" and "c".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
