package spec

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ShellExprVar is the prefix of the environment variables that carry
// expression values into a shell command: the n-th `${{ }}` of the command
// (from 1) is $MSPIPE_EXPR_n.
const ShellExprVar = "MSPIPE_EXPR_"

// shellRefs builds the script of a shell command template in which every
// expression is replaced by a quoted reference to an environment variable,
// and returns the values those variables must hold. The values never
// become shell syntax: `;`, `$()`, backticks, quotes and newlines in them
// reach the command as data, as GitHub Actions recommends doing by hand.
//
// The reference is quoted for where it stands, so the value arrives whole:
// "${V}" outside quotes, ${V} inside double quotes and in the body of a
// here-document, and '"${V}"' (closing and reopening the quote) inside
// single quotes. Two places cannot take a value as data and are refused:
// the body of a here-document with a quoted delimiter (<<'EOF' expands
// nothing), and arithmetic $(( )), where bash evaluates a variable's value
// as an expression (array subscripts there run command substitutions), so
// only an integer is accepted. Where the scan cannot follow the script
// (case patterns), the worst outcome is a value split into words: it is
// never parsed as shell syntax. next numbers the variables across all
// templates of one command.
func shellRefs(t *Template, values []any, next *int) (string, map[string]string, *shellRefError) {
	var b strings.Builder
	env := map[string]string{}
	var q shellQuoteState
	vi := 0
	for _, p := range t.Parts {
		if p.Expr == "" {
			b.WriteString(p.Literal)
			q.scan(p.Literal)
			continue
		}
		value := formatValue(values[vi])
		vi++
		switch q.top() {
		case 'h':
			if q.body.quoted {
				return "", nil, &shellRefError{Pos: p.Pos, Err: ErrQuotedHeredoc,
					Msg: fmt.Sprintf("%q is inside a here-document whose delimiter is quoted (<<'%s'), where the shell expands nothing", "${{ "+p.Expr+" }}", q.body.delim)}
			}
			q.lineExpr = true
		case '+':
			if !integerRe.MatchString(value) {
				return "", nil, &shellRefError{Pos: p.Pos, Err: ErrNotInteger,
					Msg: fmt.Sprintf("%q is %q inside $(( ))", "${{ "+p.Expr+" }}", truncate(value, 60))}
			}
		}
		*next++
		name := fmt.Sprintf("%s%d", ShellExprVar, *next)
		env[name] = value
		b.WriteString(q.ref(name))
	}
	return b.String(), env, nil
}

// ErrQuotedHeredoc is the error of an expression in the body of a
// here-document with a quoted delimiter; validate reports it.
var ErrQuotedHeredoc = errors.New("write the delimiter unquoted (<<EOF): mspipe passes the value as ${MSPIPE_EXPR_n}, which the shell expands without reading it as syntax")

// ErrNotInteger is the error of an expression value inside $(( )) that is
// not an integer.
var ErrNotInteger = errors.New("arithmetic takes an integer here: the shell would evaluate anything else as an expression, and bash runs the command substitutions in array subscripts")

// shellRefError is a refused expression of a shell command: Msg says
// which and where it stands, Err what to do.
type shellRefError struct {
	Pos Pos
	Msg string
	Err error
}

func (e *shellRefError) Error() string { return e.Msg + ": " + e.Err.Error() }
func (e *shellRefError) Unwrap() error { return e.Err }

// integerRe is what an expression value inside $(( )) must be.
var integerRe = regexp.MustCompile(`^-?[0-9]{1,19}$`)

// shellQuoteState follows POSIX sh quoting through the literal text of a
// command, so a reference can be quoted for where it stands. It keeps a
// stack of contexts: single and double quotes, command substitution ($(
// and backticks, which open a new quoting context) and arithmetic $((,
// where a value must stand unquoted.
type shellQuoteState struct {
	stack   []shellContext
	escaped bool

	pending  []heredoc // here-documents whose bodies start at the next newline
	body     heredoc   // the one being read, when the top is 'h'
	line     strings.Builder
	lineExpr bool // the body line read so far holds an expression: not a delimiter
}

// heredoc is a here-document redirection (<<WORD or <<-WORD).
type heredoc struct {
	delim  string // WORD with its quotes removed
	quoted bool   // any part of WORD was quoted: the body is not expanded
	strip  bool   // <<-: leading tabs are removed, also before the delimiter
}

type shellContext struct {
	kind  byte // '\'', '"', '(' command substitution, '`', '+' arithmetic, 'h' here-document body
	depth int  // open parentheses inside ( and +
}

func (q *shellQuoteState) top() byte {
	if len(q.stack) == 0 {
		return 0
	}
	return q.stack[len(q.stack)-1].kind
}

func (q *shellQuoteState) push(kind byte) { q.stack = append(q.stack, shellContext{kind: kind}) }
func (q *shellQuoteState) pop()           { q.stack = q.stack[:len(q.stack)-1] }

// ref returns the reference to variable name, quoted for the current
// context so that its value arrives as one word, unchanged.
func (q *shellQuoteState) ref(name string) string {
	switch q.top() {
	case '\'':
		return `'"${` + name + `}"'`
	case '"', '+', 'h':
		return `${` + name + `}`
	}
	return `"${` + name + `}"`
}

func (q *shellQuoteState) scan(s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		top := q.top()
		if top == 'h' {
			i = q.bodyChar(s, i)
			continue
		}
		if q.escaped {
			q.escaped = false
			continue
		}
		if c == '\n' && len(q.pending) > 0 && (top == 0 || top == '(' || top == '`') {
			q.startBody()
			continue
		}
		if c == '<' && strings.HasPrefix(s[i:], "<<") && !strings.HasPrefix(s[i:], "<<<") && (top == 0 || top == '(' || top == '`') {
			i = q.redirect(s, i)
			continue
		}
		if top == '\'' {
			if c == '\'' {
				q.pop()
			}
			continue
		}
		if c == '\\' {
			q.escaped = true
			continue
		}
		if c == '$' && strings.HasPrefix(s[i:], "$((") {
			q.push('+')
			i += 2
			continue
		}
		if c == '$' && strings.HasPrefix(s[i:], "$(") {
			q.push('(')
			i++
			continue
		}
		switch top {
		case '+':
			switch {
			case c == '(':
				q.stack[len(q.stack)-1].depth++
			case c == ')' && q.stack[len(q.stack)-1].depth > 0:
				q.stack[len(q.stack)-1].depth--
			case c == ')' && strings.HasPrefix(s[i:], "))"):
				q.pop()
				i++
			}
			continue
		case '"':
			switch c {
			case '"':
				q.pop()
			case '`':
				q.push('`')
			}
			continue
		}
		// Unquoted text: the top level, $( ) or backticks.
		switch c {
		case '\'':
			q.push('\'')
		case '"':
			q.push('"')
		case '`':
			if top == '`' {
				q.pop()
			} else {
				q.push('`')
			}
		case '(':
			if top == '(' {
				q.stack[len(q.stack)-1].depth++
			}
		case ')':
			if top == '(' {
				if q.stack[len(q.stack)-1].depth == 0 {
					q.pop()
				} else {
					q.stack[len(q.stack)-1].depth--
				}
			}
		}
	}
}

// redirect reads the here-document operator at s[i] ("<<" or "<<-" and its
// word), queues its body and returns the index of the word's last byte.
func (q *shellQuoteState) redirect(s string, i int) int {
	j := i + 2
	h := heredoc{}
	if j < len(s) && s[j] == '-' {
		h.strip = true
		j++
	}
	for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
		j++
	}
	var word strings.Builder
	for ; j < len(s) && !strings.ContainsRune(" \t\n;&|<>()", rune(s[j])); j++ {
		switch c := s[j]; c {
		case '\'', '"':
			h.quoted = true
			end := strings.IndexByte(s[j+1:], c)
			if end < 0 {
				word.WriteString(s[j+1:])
				j = len(s)
				break
			}
			word.WriteString(s[j+1 : j+1+end])
			j += end + 1
		case '\\':
			h.quoted = true
			if j+1 < len(s) {
				j++
				word.WriteByte(s[j])
			}
		default:
			word.WriteByte(c)
		}
	}
	h.delim = word.String()
	q.pending = append(q.pending, h)
	return j - 1
}

// startBody begins the body of the first queued here-document.
func (q *shellQuoteState) startBody() {
	q.body, q.pending = q.pending[0], q.pending[1:]
	q.line.Reset()
	q.lineExpr = false
	q.push('h')
}

// bodyChar reads s[i] in a here-document body and returns the index of
// the last byte it consumed. A line equal to the delimiter ends the body;
// in an unquoted body $(( and $( open their contexts as they do outside.
func (q *shellQuoteState) bodyChar(s string, i int) int {
	c := s[i]
	if c == '\n' {
		line := q.line.String()
		if q.body.strip {
			line = strings.TrimLeft(line, "\t")
		}
		q.line.Reset()
		done := line == q.body.delim && !q.lineExpr
		q.lineExpr = false
		if done {
			q.pop()
			if len(q.pending) > 0 {
				q.startBody()
			}
		}
		return i
	}
	q.line.WriteByte(c)
	if q.body.quoted {
		return i
	}
	if q.escaped {
		q.escaped = false
		return i
	}
	switch {
	case c == '\\':
		q.escaped = true
	case strings.HasPrefix(s[i:], "$(("):
		q.line.WriteString("((")
		q.push('+')
		return i + 2
	case strings.HasPrefix(s[i:], "$("):
		q.line.WriteByte('(')
		q.push('(')
		return i + 1
	}
	return i
}
