package host

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// Bounds of what stderrTail keeps.
const (
	tailLines    = 32   // last plain lines
	crashLines   = 16   // lines of the first panic or fatal error
	maxLineBytes = 1024 // longer lines are cut
)

// stderrTail keeps the end of a plugin's raw stderr, to explain a crash:
// the first Go panic or fatal error and the last plain lines. The hclog JSON
// lines go-plugin parses for the log are skipped. Safe for concurrent use.
type stderrTail struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	crash   []string
	inCrash bool
}

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(t.partial) < maxLineBytes {
				t.partial = append(t.partial, p[:min(len(p), maxLineBytes-len(t.partial))]...)
			}
			break
		}
		if len(t.partial) < maxLineBytes {
			t.partial = append(t.partial, p[:min(i, maxLineBytes-len(t.partial))]...)
		}
		t.addLine(string(t.partial))
		t.partial = t.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

func (t *stderrTail) addLine(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.HasPrefix(line, "{") && json.Valid([]byte(line)) {
		return
	}
	if t.crash == nil && crashStart(line) {
		t.inCrash = true
	}
	if t.inCrash && len(t.crash) < crashLines {
		t.crash = append(t.crash, line)
	}
	if strings.TrimSpace(line) == "" {
		return
	}
	if len(t.lines) == tailLines {
		t.lines = append(t.lines[:0], t.lines[1:]...)
	}
	t.lines = append(t.lines, line)
}

// crashStart tells whether line starts a Go crash report: a panic, a
// fatal error of the runtime, or a thread the C runtime could not create.
func crashStart(line string) bool {
	return strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "runtime/cgo: ")
}

// summary is one line: the panic message and where it happened, else the
// last few plain lines.
func (t *stderrTail) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.crash) > 0 {
		return t.crash[0] + crashSite(t.crash[1:])
	}
	last := t.lines[max(0, len(t.lines)-3):]
	return strings.Join(last, " | ")
}

// crashSite finds the first frame of the crashing goroutine in a Go stack
// trace: the function line after "goroutine N [...]:" and its file:line.
func crashSite(lines []string) string {
	for i, l := range lines {
		if strings.HasPrefix(l, "goroutine ") && i+2 < len(lines) {
			fn := strings.TrimSpace(lines[i+1])
			file := strings.TrimSpace(lines[i+2])
			if j := strings.LastIndex(file, " +0x"); j > 0 {
				file = file[:j]
			}
			return " (in " + fn + " at " + file + ")"
		}
	}
	return ""
}
