//go:build unix

package procgroup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the processes of a group: with roleEnv set it
// plays a role instead of running the tests.
const (
	roleEnv   = "PROCGROUP_TEST_ROLE"
	stubborn  = "PROCGROUP_TEST_IGNORE_TERM" // set: the grandchild ignores SIGTERM
	readyLine = "ready"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(m.Run())
	case "leader": // starts a grandchild in its own group and waits for it
		os.Exit(startAndWait("grandchild", false))
	case "parent": // starts a sleeper as the leader of a new group, prints its pid, waits
		os.Exit(startAndWait("grandchild", true))
	case "grandchild":
		if os.Getenv(stubborn) != "" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println(readyLine)
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(2)
}

// startAndWait runs this binary in role, its stdout ours; as a new group
// leader (Prepare) when newGroup, announcing its pid first.
func startAndWait(role string, newGroup bool) int {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if newGroup {
		if err := Prepare(cmd); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if newGroup {
		fmt.Println(cmd.Process.Pid)
	}
	_ = cmd.Wait()
	return 0
}

// group is a started test process whose stdout is a pipe shared by every
// process it starts: reading it hits EOF only once all of them have exited.
type group struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	exited chan struct{}
}

func startGroup(t *testing.T, role string, env ...string) *group {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	if err := Prepare(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	g := &group{cmd: cmd, out: bufio.NewReader(r), exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(g.exited) }()
	t.Cleanup(func() {
		_ = Signal(cmd.Process.Pid, syscall.SIGKILL)
		<-g.exited
		r.Close()
	})
	return g
}

// line reads one line of the group's output.
func (g *group) line(t *testing.T) string {
	t.Helper()
	s, err := g.out.ReadString('\n')
	if err != nil {
		t.Fatalf("read the group's output: %v", err)
	}
	return strings.TrimSpace(s)
}

// waitAllExited waits until every process holding the group's stdout has
// exited. The bound only keeps a broken helper from hanging the test.
func (g *group) waitAllExited(t *testing.T) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, g.out)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a process of the group survived")
	}
}

func TestStopEndsTheGroup(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"leaves on SIGTERM", nil},
		{"grandchild ignores SIGTERM", []string{stubborn + "=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGroup(t, "leader", tc.env...)
			if got := g.line(t); got != readyLine {
				t.Fatalf("grandchild said %q", got)
			}
			pgid := g.cmd.Process.Pid
			if got, err := syscall.Getpgid(pgid); err != nil || got != pgid {
				t.Fatalf("Getpgid(%d) = %d, %v: the leader is not in its own group", pgid, got, err)
			}
			if !Alive(pgid) {
				t.Fatal("Alive is false for a running group")
			}
			if err := Stop(pgid, g.exited, 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			select {
			case <-g.exited:
			default:
				t.Fatal("Stop returned before the leader exited")
			}
			g.waitAllExited(t)
			if !goneSoon(pgid) {
				t.Error("Alive is still true 10s after Stop")
			}
		})
	}
}

func TestSignalReachesGrandchild(t *testing.T) {
	g := startGroup(t, "leader")
	if got := g.line(t); got != readyLine {
		t.Fatalf("grandchild said %q", got)
	}
	if err := Signal(g.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	g.waitAllExited(t)
}

func TestGoneGroup(t *testing.T) {
	g := startGroup(t, "leader")
	if got := g.line(t); got != readyLine {
		t.Fatalf("grandchild said %q", got)
	}
	pgid := g.cmd.Process.Pid
	if err := Signal(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-g.exited
	g.waitAllExited(t)
	if !goneSoon(pgid) {
		t.Error("Alive is still true 10s after the group was killed")
	}
	if err := Signal(pgid, syscall.SIGTERM); err != nil {
		t.Errorf("Signal to a gone group = %v, want nil", err)
	}
	if err := Stop(pgid, g.exited, time.Second); err != nil {
		t.Errorf("Stop of a gone group = %v, want nil", err)
	}
}

func TestSignalNeedsAGroup(t *testing.T) {
	// Kill(-0) would signal the test's own group.
	if err := Signal(0, syscall.SIGTERM); err == nil {
		t.Error("Signal(0) = nil, want an error")
	}
	if Alive(0) {
		t.Error("Alive(0) = true")
	}
}

func TestPrepareKeepsAttributes(t *testing.T) {
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: false, Noctty: true}
	if err := Prepare(cmd); err != nil {
		t.Fatal(err)
	}
	if !cmd.SysProcAttr.Setpgid || !cmd.SysProcAttr.Noctty {
		t.Errorf("SysProcAttr = %+v, want Setpgid and the Noctty it had", cmd.SysProcAttr)
	}
}

// goneSoon waits (at most 10s) until no process of the group can run. A
// killed process that closed its pipe is still exiting for a moment (it
// closes its files before it becomes a zombie), so "gone" is checked as
// "gone soon", not at one instant.
func goneSoon(pgid int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for Alive(pgid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
