package cli

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Commands that read a file the user names refuse devices and FIFOs at
// once: before, `ckpt inspect /dev/zero` read until the process died of
// OOM, and a FIFO named as a spec or rank table blocked forever.
func TestSpecialFilesAreRefused(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"ckpt", "inspect", "/dev/zero"}, "read checkpoint /dev/zero: is a character device, not a regular file"},
		{[]string{"validate", fifo}, "is a FIFO, not a regular file"},
		{[]string{"plan", fifo}, "read spec " + fifo + ": is a FIFO, not a regular file"},
		{[]string{"ranktable", "validate", fifo}, "read rank table " + fifo + ": is a FIFO, not a regular file"},
	}
	for _, c := range cases {
		type result struct {
			code     int
			out, err string
		}
		done := make(chan result, 1)
		go func() {
			code, out, errOut := runCLI(t, c.args...)
			done <- result{code, out, errOut}
		}()
		select {
		case r := <-done:
			if r.code == 0 || !strings.Contains(r.out+r.err, c.want) {
				t.Errorf("mspipe %s: exit %d, output %q; want non-zero and %q", strings.Join(c.args, " "), r.code, r.out+r.err, c.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("mspipe %s: no answer after 20s", strings.Join(c.args, " "))
		}
	}
}
