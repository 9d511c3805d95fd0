package exec

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/mspipe/mspipe/plugins"
)

// readOutputs parses the $MSPIPE_OUTPUT file: "name=value" lines and
// multi-line values written as
//
//	name<<DELIMITER
//	...
//	DELIMITER
//
// Blank lines are skipped; a later value replaces an earlier one. Values
// that parse as JSON are JSON (42 is an integer, true a boolean), others are
// strings.
func readOutputs(path string) (map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read $MSPIPE_OUTPUT: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxOutput+1))
	if err != nil {
		return nil, fmt.Errorf("read $MSPIPE_OUTPUT %s: %w", path, err)
	}
	if len(data) > maxOutput {
		return nil, fmt.Errorf("$MSPIPE_OUTPUT %s: larger than %d bytes", path, maxOutput)
	}
	return parseOutputs(data)
}

func parseOutputs(data []byte) (map[string]any, error) {
	outputs := map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxOutput+1)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		eq := strings.IndexByte(line, '=')
		heredoc := strings.Index(line, "<<")
		var name, value string
		switch {
		case heredoc > 0 && (eq < 0 || heredoc < eq):
			name = line[:heredoc]
			delim := line[heredoc+2:]
			if delim == "" {
				return nil, fmt.Errorf("$MSPIPE_OUTPUT line %d: %q has no delimiter after <<", lineNo, name)
			}
			start := lineNo
			var body []string
			closed := false
			for sc.Scan() {
				lineNo++
				l := strings.TrimSuffix(sc.Text(), "\r")
				if l == delim {
					closed = true
					break
				}
				body = append(body, l)
			}
			if !closed {
				return nil, fmt.Errorf("$MSPIPE_OUTPUT line %d: %q: no line %q ends the value", start, name, delim)
			}
			value = strings.Join(body, "\n")
		case eq > 0:
			name, value = line[:eq], line[eq+1:]
		default:
			return nil, fmt.Errorf("$MSPIPE_OUTPUT line %d: want name=value or name<<DELIMITER, got %q", lineNo, truncate(line, 60))
		}
		if err := plugins.ValidateOutputName(name); err != nil {
			return nil, fmt.Errorf("$MSPIPE_OUTPUT line %d: %w", lineNo, err)
		}
		if name == "exit_code" || name == "stdout" {
			return nil, fmt.Errorf("$MSPIPE_OUTPUT line %d: %q is set by the exec stage itself", lineNo, name)
		}
		outputs[name] = outputValue(value)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("$MSPIPE_OUTPUT line %d: %w", lineNo+1, err)
	}
	return outputs, nil
}

// outputValue is the JSON value of s if s is JSON, else s.
func outputValue(s string) any {
	if v, err := plugins.DecodeJSON([]byte(s)); err == nil {
		return v
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func trimEOL(s string) string { return strings.TrimRight(s, "\r\n") }

// tailBuffer keeps the last max bytes written to it. It trims only when it
// holds twice that, so that a stream of short lines costs linear time.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) write(s string) {
	t.buf = append(t.buf, s...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
}

// String returns the last max bytes, starting at a whole UTF-8 character.
func (t *tailBuffer) String() string {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	return string(b)
}

// lineTail keeps the last max non-blank lines added to it.
type lineTail struct {
	max   int
	lines []string
}

func (t *lineTail) add(line string) {
	if strings.TrimSpace(line) == "" {
		return
	}
	if len(t.lines) == t.max {
		t.lines = append(t.lines[:0], t.lines[1:]...)
	}
	t.lines = append(t.lines, truncate(line, 500))
}

// text is "; stderr ends with: a | b", or "" when nothing was kept.
func (t *lineTail) text() string {
	if len(t.lines) == 0 {
		return ""
	}
	return "; stderr ends with: " + strings.Join(t.lines, " | ")
}
