package host

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

// memoryError names who ran out of memory only when a limit is set and
// the failure shows an allocation refused, and keeps the original error.
func TestMemoryErrorNamesTheProcess(t *testing.T) {
	goOOM := "fatal error: runtime: out of memory\n\nruntime stack:\nruntime.throw({0x4c7dee?, 0x2bd7?})\n"
	cases := []struct {
		name   string
		limit  int64
		stderr string // the plugin's stderr
		err    error
		want   string // prefix of the message; "" = err unchanged
	}{
		{"plugin over its limit", 256 << 20, goOOM, fmt.Errorf("plugin memhog (pid 7): %w (exit status 2)", plugins.ErrPluginExited),
			"plugin memhog ran out of memory: limit 256.0 MiB per process (limits.memory): plugin memhog (pid 7)"},
		{"plugin thread refused", 256 << 20, "runtime/cgo: pthread_create failed: Resource temporarily unavailable\nSIGABRT: abort\n",
			fmt.Errorf("plugin memhog (pid 7): %w (signal: aborted)", plugins.ErrPluginExited),
			"plugin memhog ran out of memory: limit 256.0 MiB per process (limits.memory)"},
		{"rank over the limit", 384 << 20, "", errors.New("rank failed: rank 3 (device 3) exit status 2: fatal error: runtime: out of memory"),
			"rank 3 ran out of memory: limit 384.0 MiB per process (limits.memory): rank failed: rank 3 (device 3)"},
		{"python child", 1 << 30, "", errors.New("command exited with code 1: MemoryError"),
			"a process of the stage ran out of memory: limit 1 GiB per process (limits.memory)"},
		{"no limit", 0, goOOM, fmt.Errorf("plugin memhog (pid 7): %w", plugins.ErrPluginExited), ""},
		{"simulated device memory", 1 << 30, "", errors.New("rank 0 (device 0) exit status 1: out of device memory: optimizer moments needs 1.0 MiB"), ""},
		{"plugin crash of another kind", 1 << 30, "panic: boom\n", fmt.Errorf("plugin x (pid 7): %w", plugins.ErrPluginExited), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := &Client{label: "plugin memhog", cfg: LaunchConfig{MemoryLimit: c.limit}, tail: &stderrTail{}}
			client.tail.Write([]byte(c.stderr))
			got := client.memoryError(c.err)
			if c.want == "" {
				if got != c.err {
					t.Fatalf("got %v, want the error unchanged", got)
				}
				return
			}
			if !strings.HasPrefix(got.Error(), c.want) {
				t.Errorf("got %q\nwant prefix %q", got, c.want)
			}
			if !errors.Is(got, ErrMemoryLimit) || !errors.Is(got, c.err) {
				t.Errorf("%v wraps neither ErrMemoryLimit nor the original error", got)
			}
		})
	}
}

// limitMemory sets RLIMIT_DATA on a running process; what it starts later
// inherits it.
func TestLimitMemoryAppliesToTheProcessAndItsChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("memory limits are applied on Linux only")
	}
	cmd := exec.Command("/bin/sh", "-c", "read line; sh -c 'grep \"Max data size\" /proc/$$/limits'")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := limitMemory(cmd.Process.Pid, 300<<20); err != nil {
		t.Fatalf("limitMemory: %v", err)
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(out.String()) // Max data size  SOFT  HARD  bytes
	if len(fields) < 6 || fields[3] != "314572800" || fields[4] != "314572800" {
		t.Errorf("the child's limits: %q, want soft and hard 314572800", out.String())
	}
}
