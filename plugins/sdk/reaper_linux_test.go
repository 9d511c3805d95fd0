package sdk

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mspipe/mspipe/internal/procgroup"
	"github.com/mspipe/mspipe/plugins"
)

// With reaperRoleEnv set, the test binary plays one process of a plugin's
// tree instead of running the tests.
const reaperRoleEnv = "SDK_TEST_REAPER_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(reaperRoleEnv) {
	case "":
		os.Exit(m.Run())
	case "host": // starts a plugin the way plugins/host does, prints its pid
		os.Exit(startRole("plugin", func(cmd *exec.Cmd) error {
			return procgroup.PrepareSupervisor(cmd, plugins.ParentDeathSignal)
		}, true))
	case "plugin": // what ServeContext does around a stage that runs a command
		os.Exit(pluginRole())
	case "command": // a command that starts a process in a session of its own
		os.Exit(startRole("escaped", func(cmd *exec.Cmd) error {
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			return nil
		}, false))
	case "children": // hasChildren before, with and after a child of its own
		os.Exit(childrenRole())
	case "served": // a plugin whose stage leaves a process behind, run twice
		os.Exit(servedRole())
	case "escaper": // starts an escaped process, prints its pid and exits
		os.Exit(escaperRole())
	case "escaped":
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
		fmt.Println("ready")
		time.Sleep(time.Hour)
	}
	os.Exit(2)
}

// startRole runs this binary in role, its stdout ours, and waits for it.
func startRole(role string, prepare func(*exec.Cmd) error, printPid bool) int {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), reaperRoleEnv+"="+role)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := prepare(cmd); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if printPid {
		fmt.Println(cmd.Process.Pid)
	}
	_ = cmd.Wait()
	return 0
}

func pluginRole() int {
	gone, err := superviseDescendants()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go startRole("command", procgroup.Prepare, false)
	<-gone
	if err := killDescendants(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func childrenRole() int {
	before := hasChildren()
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	during := hasChildren()
	_ = child.Process.Kill()
	_ = child.Wait()
	fmt.Println(before, during, hasChildren())
	return 0
}

// The reaper skips its scan of /proc only when the plugin has no child at
// all: a running child (or a zombie) makes it look.
func TestHasChildren(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), reaperRoleEnv+"=children")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "false true false" {
		t.Errorf("hasChildren before, with and after a child = %s, want false true false", got)
	}
}

// kill -9 of mspipe (here "host") takes down every process below the
// plugin, even one that left every process group with setsid and ignores
// SIGTERM and SIGHUP: it stays the plugin's descendant (subreaper), and
// the plugin kills it on the parent-death signal.
func TestKilledHostLeavesNoDescendant(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	host := exec.Command(os.Args[0])
	host.Env = append(os.Environ(), reaperRoleEnv+"=host")
	host.Stdout, host.Stderr = w, os.Stderr
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer r.Close()
	out := bufio.NewReader(r)
	line := func() string {
		s, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("read the tree's output: %v", err)
		}
		return strings.TrimSpace(s)
	}
	plugin, err := strconv.Atoi(line())
	if err != nil {
		t.Fatalf("the host did not print the plugin's pid: %v", err)
	}
	if got := line(); got != "ready" {
		t.Fatalf("the escaped process said %q", got)
	}
	var escaped int
	for _, pid := range descendants(plugin) {
		if sid, _ := unix.Getsid(pid); sid == pid {
			escaped = pid
		}
	}
	if escaped == 0 {
		t.Fatalf("no process in a session of its own below the plugin (descendants %v)", descendants(plugin))
	}
	t.Cleanup(func() {
		_ = syscall.Kill(plugin, syscall.SIGKILL)
		_ = syscall.Kill(escaped, syscall.SIGKILL)
	})

	if err := host.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = host.Wait()
	// Every process of the tree holds the pipe: EOF means all are gone.
	// The bound only keeps a broken reaper from hanging the test.
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, out); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("a process survived the kill -9 of its host: descendants of the plugin %v, escaped %d", descendants(plugin), escaped)
	}
}
