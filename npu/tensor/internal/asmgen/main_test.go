package main

import (
	"strings"
	"testing"
)

// Every generated file carries the generated-code header and build tag,
// each function has a doc comment, and generating twice gives the same
// bytes (the drift test in package tensor compares them to the committed
// files).
func TestOutputsAreDocumentedAndDeterministic(t *testing.T) {
	for _, o := range outputs {
		gen := func() string {
			var a asm
			o.write(&a)
			return a.String()
		}
		text := gen()
		if text != gen() {
			t.Errorf("%s: two runs differ", o.name)
		}
		lines := strings.Split(text, "\n")
		funcs := 0
		for i, line := range lines {
			if !strings.HasPrefix(line, "TEXT ") {
				continue
			}
			funcs++
			if i == 0 || !strings.HasPrefix(lines[i-1], "//") {
				t.Errorf("%s: %s has no doc comment", o.name, strings.Fields(line)[1])
			}
		}
		if funcs == 0 {
			t.Errorf("%s: no functions", o.name)
		}
	}
}
