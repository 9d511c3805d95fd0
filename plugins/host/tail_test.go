package host

import (
	"fmt"
	"strings"
	"testing"
)

func TestStderrTail(t *testing.T) {
	const trace = `{"@level":"debug","@message":"plugin address"}
some plain line
panic: boom

goroutine 7 [running]:
main.run.func1()
	/src/main.go:75 +0x25
created by main.run in goroutine 6
	/src/main.go:74 +0x1d
`
	var tail stderrTail
	// go-plugin writes a line and its newline separately; split further.
	for _, chunk := range strings.SplitAfter(trace, "o") {
		tail.Write([]byte(chunk))
	}
	want := "panic: boom (in main.run.func1() at /src/main.go:75)"
	if got := tail.summary(); got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}

	var plain stderrTail
	for i := range 40 {
		fmt.Fprintf(&plain, "line %d\n", i)
	}
	plain.Write([]byte(strings.Repeat("x", 5000) + "\n"))
	got := plain.summary()
	if !strings.HasPrefix(got, "line 38 | line 39 | xxx") || len(got) > 1100 {
		t.Errorf("summary = %.60q (len %d)", got, len(got))
	}
	var empty stderrTail
	if empty.summary() != "" {
		t.Errorf("empty summary = %q", empty.summary())
	}
}
