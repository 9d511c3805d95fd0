package sdk

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

// leavingStage starts, in each Run, a process that leaves its parent and
// its session (the escaper exits at once, so the process is reparented to
// the plugin), and returns its pid as the output "pid" with whether it
// was running then.
type leavingStage struct{}

func (leavingStage) Describe(context.Context) (plugins.Descriptor, error) {
	return plugins.Descriptor{Name: "test/leaving", Version: "1"}, nil
}

func (leavingStage) Validate(context.Context, plugins.ValidateRequest) ([]plugins.Problem, error) {
	return nil, nil
}

func (leavingStage) Run(ctx context.Context, _ plugins.RunRequest, _ func(plugins.Event)) (map[string]any, error) {
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), reaperRoleEnv+"=escaper")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("escaper: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return nil, fmt.Errorf("escaper printed %q", out)
	}
	return map[string]any{"pid": pid, "running": processRunning(pid)}, nil
}

// processRunning reports whether pid exists and is not a zombie.
func processRunning(pid int) bool {
	state, _, ok := procParent(pid)
	return ok && state != 'Z' && state != 'X'
}

func escaperRole() int {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), reaperRoleEnv+"=escaped")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(cmd.Process.Pid)
	return 0
}

// servedRole is a plugin process serving two runs one after another, as
// when mspipe reuses it for the next stage: after each run it prints the
// pid of the process the run left, whether it ran during the run, and
// whether it is still there, running or as a zombie, once the run has
// returned.
func servedRole() int {
	if _, err := superviseDescendants(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &served{stage: leavingStage{}, base: context.Background()}
	for range 2 {
		out, err := srv.Run(context.Background(), plugins.RunRequest{}, func(plugins.Event) {})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		pid := out["pid"].(int)
		state, ppid, exists := procParent(pid) // a zombie exists too
		fmt.Println(pid, out["running"], exists, string(state), ppid, os.Getpid())
	}
	return 0
}

// A plugin process may serve several stages one after another
// (plugins.Info.Reusable): what a run left behind, even in a session of
// its own, is killed and collected when the run returns, not only when
// the process ends, so the next stage does not find it.
func TestRunLeavesNoDescendant(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), reaperRoleEnv+"=served")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a line per run, got %q", out)
	}
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("run %d: %q", i+1, line)
		}
		pid, _ := strconv.Atoi(f[0])
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		if f[1] != "true" {
			t.Errorf("run %d: the process it left (pid %s) was not running during the run: the test proves nothing", i+1, f[0])
		}
		if f[2] != "false" {
			t.Errorf("run %d: the process it left (pid %s) is still there after the run returned (%s)", i+1, f[0], line)
		}
	}
}
