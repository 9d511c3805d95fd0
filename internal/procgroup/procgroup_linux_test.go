package procgroup

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A group leader dies with the process that started it, even when that
// process is killed outright (the parent-death signal).
func TestLeaderDiesWithItsParent(t *testing.T) {
	g := startGroup(t, "parent")
	// The parent prints the leader's pid once Start returns, the leader
	// prints its ready line once it runs: two processes writing one pipe,
	// in either order (on a loaded machine the leader often comes first).
	first, second := g.line(t), g.line(t)
	if first == readyLine {
		first, second = second, first
	}
	leader, err := strconv.Atoi(first)
	if err != nil {
		t.Fatalf("the parent did not print the leader's pid: %v", err)
	}
	t.Cleanup(func() { _ = Signal(leader, syscall.SIGKILL) })
	if second != readyLine {
		t.Fatalf("the leader said %q", second)
	}
	if err := syscall.Kill(g.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-g.exited
	// Only the parent and the leader hold the pipe: EOF means the kernel
	// killed the leader.
	g.waitAllExited(t)
}

// A supervisor starts with its parent-death signal deliverable even when
// mspipe ignores it (SIGHUP under nohup): an ignored signal would stay
// ignored across exec, and the supervisor would outlive mspipe.
func TestSupervisorDeathSignalIsNotIgnored(t *testing.T) {
	signal.Ignore(syscall.SIGHUP)
	t.Cleanup(func() { signal.Reset(syscall.SIGHUP) })
	cmd := exec.Command("sleep", "60")
	if err := PrepareSupervisor(cmd, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGHUP || !cmd.SysProcAttr.Setpgid {
		t.Fatalf("SysProcAttr = %+v, want a new group and SIGHUP as the parent-death signal", cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			ignored, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if ignored&(1<<(syscall.SIGHUP-1)) != 0 {
				t.Errorf("the supervisor ignores SIGHUP (SigIgn %s)", strings.TrimSpace(hex))
			}
			return
		}
	}
	t.Fatal("no SigIgn line in /proc/<pid>/status")
}

// Exited is true from a process's death until it is reaped, and false
// while it runs.
func TestExitedBeforeReaped(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if Exited(pid) {
		t.Error("a running process is reported exited")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: a zombie, once the kernel has ended it.
	deadline := time.Now().Add(10 * time.Second)
	for !Exited(pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !Exited(pid) {
		t.Error("a killed process not yet reaped is not reported exited")
	}
	_ = cmd.Wait()
}
