package procgroup

import (
	"strconv"
	"syscall"
	"testing"
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
