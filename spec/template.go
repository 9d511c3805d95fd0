package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/expr-lang/expr/vm"
	"gopkg.in/yaml.v3"
)

// Template is a string value holding one or more `${{ expr }}` parts.
type Template struct {
	Raw   string
	Pos   Pos // the YAML value
	Parts []TemplatePart
	what  string // the value's place in the spec, for messages
	node  *yaml.Node
}

// TemplatePart is literal text or an expression of a Template.
type TemplatePart struct {
	Literal string
	Expr    string // source of the expression; "" for a literal part
	Pos     Pos    // where the expression starts in the file
	program *vm.Program
	typ     string // static type name after compilation
}

// Whole reports whether the template is exactly one expression (surrounding
// blanks allowed), so that its value keeps the expression's type.
func (t *Template) Whole() bool {
	n := 0
	for _, p := range t.Parts {
		if p.Expr != "" {
			n++
		} else if strings.TrimSpace(p.Literal) != "" {
			return false
		}
	}
	return n == 1
}

// Node is the YAML node the template came from.
func (t *Template) Node() *yaml.Node { return t.node }

// template splits a scalar into literal and expression parts, reporting
// unclosed or empty expressions.
func (d *decoder) template(n *yaml.Node, what string) *Template {
	t := &Template{Raw: n.Value, Pos: d.pos(n), what: what, node: n}
	s := n.Value
	off := 0
	for {
		i := strings.Index(s[off:], "${{")
		if i < 0 {
			if off < len(s) {
				t.Parts = append(t.Parts, TemplatePart{Literal: s[off:]})
			}
			break
		}
		i += off
		if i > off {
			t.Parts = append(t.Parts, TemplatePart{Literal: s[off:i]})
		}
		j := strings.Index(s[i+3:], "}}")
		if j < 0 {
			d.errs.add(exprPos(n, d.file, i), "%s: unclosed \"${{\": add \"}}\" after the expression", what)
			return nil
		}
		src := s[i+3 : i+3+j]
		lead := len(src) - len(strings.TrimLeft(src, " \t"))
		code := strings.TrimSpace(src)
		if code == "" {
			d.errs.add(exprPos(n, d.file, i), "%s: empty expression \"${{ }}\"", what)
			return nil
		}
		t.Parts = append(t.Parts, TemplatePart{Expr: code, Pos: exprPos(n, d.file, i+3+lead)})
		off = i + 3 + j + 2
	}
	return t
}

// exprPos maps a byte offset inside a scalar's value to a file position. It
// is exact for single-line plain and quoted scalars without escapes, and
// falls back to the value's own position otherwise.
func exprPos(n *yaml.Node, file string, off int) Pos {
	p := Pos{File: file, Line: n.Line, Col: n.Column}
	if strings.Contains(n.Value[:min(off, len(n.Value))], "\n") || n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return p
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		p.Col++
	}
	p.Col += len([]rune(n.Value[:min(off, len(n.Value))]))
	return p
}

// at returns the position of byte offset off within the expression part.
func (tp *TemplatePart) at(off int) Pos {
	p := tp.Pos
	if off > 0 && off <= len(tp.Expr) && !strings.Contains(tp.Expr[:off], "\n") {
		p.Col += len([]rune(tp.Expr[:off]))
	}
	return p
}

func (t *Template) String() string { return t.Raw }

// formatValue renders an expression result inside a string template:
// lists and maps as JSON (`[1,2,3]`, `{"a":1}`), the form a program or a
// YAML reader takes, not Go's `[1 2 3]` or `map[a:1]`.
func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return fmt.Sprint(x)
	}
	if k := reflect.ValueOf(v).Kind(); k == reflect.Slice || k == reflect.Map || k == reflect.Array {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) == nil {
			return strings.TrimSuffix(b.String(), "\n")
		}
	}
	return fmt.Sprint(v)
}
