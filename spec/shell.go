package spec

import (
	"fmt"
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
// "${V}" outside quotes, ${V} inside double quotes and arithmetic, and
// '"${V}"' (closing and reopening the quote) inside single quotes. Where
// the scan cannot follow the script (here-documents, case patterns), the
// worst outcome is a value split into words: it is never parsed as shell
// syntax. next numbers the variables across all templates of one command.
func shellRefs(t *Template, values []any, next *int) (string, map[string]string) {
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
		*next++
		name := fmt.Sprintf("%s%d", ShellExprVar, *next)
		env[name] = formatValue(values[vi])
		vi++
		b.WriteString(q.ref(name))
	}
	return b.String(), env
}

// shellQuoteState follows POSIX sh quoting through the literal text of a
// command, so a reference can be quoted for where it stands. It keeps a
// stack of contexts: single and double quotes, command substitution ($(
// and backticks, which open a new quoting context) and arithmetic $((,
// where a value must stand unquoted.
type shellQuoteState struct {
	stack   []shellContext
	escaped bool
}

type shellContext struct {
	kind  byte // '\'', '"', '(' command substitution, '`', '+' arithmetic
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
	case '"', '+':
		return `${` + name + `}`
	}
	return `"${` + name + `}"`
}

func (q *shellQuoteState) scan(s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		top := q.top()
		if q.escaped {
			q.escaped = false
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
