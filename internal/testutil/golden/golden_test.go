package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.failures = append(r.failures, fmt.Sprintf(f, a...)) }
func (r *recorder) Fatal(a ...any) {
	r.failures = append(r.failures, fmt.Sprint(a...))
	runtime.Goexit()
}
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); runtime.Goexit() }

// check runs Check with update set as asked and returns its failures.
func check(t *testing.T, updating bool, path string, got string) []string {
	old := *update
	*update = updating
	defer func() { *update = old }()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); Check(r, path, []byte(got)) }()
	<-done
	return r.failures
}

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "testdata", "out.golden")
	if f := check(t, false, path, "one\n"); len(f) != 1 || !strings.Contains(f[0], "go test -update writes it") {
		t.Errorf("missing golden file: failures %q", f)
	}
	if f := check(t, true, path, "one\n"); len(f) != 0 {
		t.Errorf("-update: failures %q", f)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "one\n" {
		t.Errorf("-update wrote %q, %v", data, err)
	}
	if f := check(t, false, path, "one\n"); len(f) != 0 {
		t.Errorf("same output: failures %q", f)
	}
	f := check(t, false, path, "two\n")
	if len(f) != 1 || !strings.Contains(f[0], "--- got\ntwo\n\n--- want\none\n") || !strings.Contains(f[0], path) {
		t.Errorf("different output: failures %q", f)
	}
	if data, _ := os.ReadFile(path); string(data) != "one\n" {
		t.Errorf("a failed check changed the file: %q", data)
	}
}
