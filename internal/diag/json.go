package diag

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// JSONSyntaxError finds the first byte at which data stops being valid JSON
// (RFC 8259) and describes what was expected there, in a message that starts
// "syntax error: ". It reports found=false for valid JSON, exactly when
// json.Valid(data) is true.
//
// encoding/json's SyntaxError.Offset is exact only for errors between tokens;
// inside a string, number or literal it counts bytes differently. A checker
// reads the file with the decoder and calls this scanner only once the
// decoder has failed, to name the place precisely. It is iterative, so
// nesting depth cannot exhaust the stack.
func JSONSyntaxError(data []byte) (off int, msg string, found bool) {
	const (
		wantValue = iota
		wantKey
		afterValue
	)
	var stack []byte // open '{' and '['
	n := len(data)
	i := 0
	state := wantValue
	for {
		i = SkipJSONSpace(data, i)
		switch state {
		case wantValue:
			if i >= n {
				return n, "syntax error: expected a value, found end of file", true
			}
			switch c := data[i]; {
			case c == '{':
				stack = append(stack, '{')
				i = SkipJSONSpace(data, i+1)
				if i < n && data[i] == '}' {
					stack = stack[:len(stack)-1]
					i++
					state = afterValue
				} else {
					state = wantKey
				}
			case c == '[':
				stack = append(stack, '[')
				i = SkipJSONSpace(data, i+1)
				if i < n && data[i] == ']' {
					stack = stack[:len(stack)-1]
					i++
					state = afterValue
				}
			case c == '"':
				end, off, msg := scanString(data, i)
				if msg != "" {
					return off, msg, true
				}
				i = end
				state = afterValue
			case c == '-' || isDigit(c):
				end, off, msg := scanNumber(data, i)
				if msg != "" {
					return off, msg, true
				}
				i = end
				state = afterValue
			default:
				end, ok := scanLiteral(data, i)
				if !ok {
					return i, "syntax error: expected a value, found " + describeAt(data, i), true
				}
				i = end
				state = afterValue
			}
		case wantKey:
			if i >= n || data[i] != '"' {
				return i, "syntax error: expected a quoted object key, found " + describeAt(data, i), true
			}
			end, off, msg := scanString(data, i)
			if msg != "" {
				return off, msg, true
			}
			i = SkipJSONSpace(data, end)
			if i >= n || data[i] != ':' {
				return i, "syntax error: expected ':' after object key, found " + describeAt(data, i), true
			}
			i++
			state = wantValue
		case afterValue:
			if len(stack) == 0 {
				if i < n {
					return i, "syntax error: expected end of file after the top-level value, found " + describeAt(data, i), true
				}
				return 0, "", false
			}
			top := stack[len(stack)-1]
			closer, what := byte('}'), "object member"
			if top == '[' {
				closer, what = ']', "array element"
			}
			switch {
			case i < n && data[i] == ',':
				next := SkipJSONSpace(data, i+1)
				if next < n && (data[next] == '}' || data[next] == ']') {
					return i, fmt.Sprintf("syntax error: trailing comma before '%c' is not allowed in JSON", data[next]), true
				}
				i++
				if top == '{' {
					state = wantKey
				} else {
					state = wantValue
				}
			case i < n && data[i] == closer:
				stack = stack[:len(stack)-1]
				i++
			default:
				return i, fmt.Sprintf("syntax error: expected ',' or '%c' after %s, found %s", closer, what, describeAt(data, i)), true
			}
		}
	}
}

// scanString checks the string literal starting at data[start] == '"'. It
// returns the offset just past the closing quote, or the offset and message of
// the first error.
func scanString(data []byte, start int) (end, errOff int, msg string) {
	for i := start + 1; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, 0, ""
		case c == '\n':
			return 0, start, "syntax error: unterminated string (newline before the closing quote)"
		case c < 0x20:
			return 0, i, fmt.Sprintf("syntax error: control character U+%04X in string must be escaped", c)
		case c == '\\':
			if i+1 >= len(data) {
				return 0, start, "syntax error: unterminated string, found end of file"
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(data) || !isHex(data[k]) {
						return 0, i, "syntax error: invalid \\u escape in string: want four hex digits"
					}
				}
				i += 5
			default:
				return 0, i, "syntax error: invalid escape " + strconv.Quote(`\`+string(rune(data[i+1]))) + " in string"
			}
		}
	}
	return 0, start, "syntax error: unterminated string, found end of file"
}

// scanNumber checks the number starting at data[start]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(data []byte, start int) (end, errOff int, msg string) {
	i := start
	digits := func() (int, string) {
		if i >= len(data) || !isDigit(data[i]) {
			return i, "syntax error: invalid number: expected a digit, found " + describeAt(data, i)
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
		return 0, ""
	}
	if data[i] == '-' {
		i++
	}
	if i < len(data) && data[i] == '0' {
		i++
	} else if off, msg := digits(); msg != "" {
		return 0, off, msg
	}
	if i < len(data) && data[i] == '.' {
		i++
		if off, msg := digits(); msg != "" {
			return 0, off, msg
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if off, msg := digits(); msg != "" {
			return 0, off, msg
		}
	}
	return i, 0, ""
}

// scanLiteral matches true, false or null at data[start].
func scanLiteral(data []byte, start int) (end int, ok bool) {
	for _, lit := range []string{"true", "false", "null"} {
		if len(data)-start >= len(lit) && string(data[start:start+len(lit)]) == lit {
			return start + len(lit), true
		}
	}
	return 0, false
}

// describeAt names what sits at data[i] for a message: a bare word such as
// "True" whole, any other character quoted, or "end of file".
func describeAt(data []byte, i int) string {
	if i >= len(data) {
		return "end of file"
	}
	if isWordByte(data[i]) {
		j := i
		for j < len(data) && j-i < 24 && isWordByte(data[j]) {
			j++
		}
		return strconv.Quote(string(data[i:j]))
	}
	r, _ := utf8.DecodeRune(data[i:])
	if r == utf8.RuneError {
		return fmt.Sprintf("byte 0x%02x", data[i])
	}
	return strconv.QuoteRune(r)
}

// SkipJSONSpace returns the offset of the first byte at or after i that is
// not JSON whitespace (space, tab, newline, carriage return).
func SkipJSONSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func isDigit(c byte) bool    { return '0' <= c && c <= '9' }
func isHex(c byte) bool      { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
func isWordByte(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' }
