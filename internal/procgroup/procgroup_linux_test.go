package procgroup

import (
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A group leader dies with the process that started it, even when that
// process is killed outright (the parent-death signal).
func TestLeaderDiesWithItsParent(t *testing.T) {
	g := startGroup(t, "parent")
	leader, err := strconv.Atoi(g.line(t))
	if err != nil {
		t.Fatalf("the parent did not print the leader's pid: %v", err)
	}
	t.Cleanup(func() { _ = Signal(leader, syscall.SIGKILL) })
	if got := g.line(t); got != readyLine {
		t.Fatalf("the leader said %q", got)
	}
	if err := syscall.Kill(g.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-g.exited
	// Only the parent and the leader hold the pipe: EOF means the kernel
	// killed the leader.
	g.waitAllExited(t)
}

// A process that left every group with setsid still dies when the
// supervisor's parent is killed outright: it stays the supervisor's
// descendant (subreaper) and the supervisor kills it on the parent-death
// signal.
func TestSupervisorTakesEscapedProcessesDown(t *testing.T) {
	g := startGroup(t, "supervisor-parent")
	supervisor, err := strconv.Atoi(g.line(t))
	if err != nil {
		t.Fatalf("the parent did not print the supervisor's pid: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(supervisor, syscall.SIGKILL) })
	if got := g.line(t); got != readyLine {
		t.Fatalf("the grandchild said %q", got)
	}
	var escaped int
	for _, pid := range descendants(supervisor) {
		if sid, _ := unix.Getsid(pid); sid == pid {
			escaped = pid
		}
	}
	if escaped == 0 {
		t.Fatalf("no process in a session of its own below the supervisor (descendants %v)", descendants(supervisor))
	}
	t.Cleanup(func() { _ = syscall.Kill(escaped, syscall.SIGKILL) })
	if err := syscall.Kill(g.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-g.exited
	// Every process of the tree holds the pipe: EOF means all are gone,
	// the setsid'd one (which ignores SIGTERM) included.
	g.waitAllExited(t)
}
