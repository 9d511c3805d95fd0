package sdk

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mspipe/mspipe/plugins"
)

// killWait bounds how long killDescendants keeps killing what the plugin's
// descendants keep starting; pollStep is the pause between rounds.
const (
	killWait = 5 * time.Second
	pollStep = 5 * time.Millisecond
	// reapWait bounds how long reapExited waits for killed children to
	// finish exiting.
	reapWait = time.Second
)

// superviseDescendants makes the plugin process a child subreaper
// (PR_SET_CHILD_SUBREAPER): a descendant whose parent exits is reparented
// to the plugin rather than to init, even one that called setsid, so all
// the stage starts stays below the plugin, where killDescendants finds it.
// The returned channel is closed when plugins.ParentDeathSignal arrives:
// mspipe is gone.
func superviseDescendants() (parentGone <-chan struct{}, err error) {
	gone := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, plugins.ParentDeathSignal)
	go func() {
		<-sig
		close(gone)
	}()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return gone, fmt.Errorf("become the reaper of the stage's processes: %w", err)
	}
	return gone, nil
}

// killDescendants sends SIGKILL to every live descendant of this process,
// round after round until none is left (what a dying process started is
// reparented here), for at most killWait. Zombies are left to whoever
// reaps them: they cannot run.
func killDescendants() error {
	if !hasChildren() {
		return nil
	}
	deadline := time.Now().Add(killWait)
	for {
		pids := descendants(os.Getpid())
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive %v after SIGKILL", pids, killWait)
		}
		time.Sleep(pollStep)
	}
}

// hasChildren reports whether this process has any child, running or
// a zombie. As a subreaper it has a descendant only if it has a child
// (an orphan is reparented here, not to init), so without one the scan of
// every process in /proc, a few ms on a busy host, is not needed. When the
// kernel cannot say, it answers true and the scan decides.
func hasChildren() bool {
	var info unix.Siginfo
	// WNOWAIT: look, never reap; a child os/exec waits for stays its own.
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
	return err != syscall.ECHILD
}

// descendants lists the live (not zombie) descendants of root, from the
// parent links in /proc.
func descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	live := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, ppid, ok := procParent(pid)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], pid)
		live[pid] = state != 'Z' && state != 'X'
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if live[c] {
				out = append(out, c)
			}
			queue = append(queue, c)
		}
	}
	return out
}

// procParent reads the state and parent of a process from /proc/<pid>/stat
// ("pid (comm) state ppid ...").
func procParent(pid int) (state byte, ppid int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], ppid, true
}

// reapExited collects every child of this process once it has ended,
// waiting up to reapWait. Called only when no run is in progress
// (served.endRun), after killDescendants: the children left then are what
// a finished run started and left behind, killed and reparented here as
// orphans. Go waits only for the children it started itself, so without
// this each of them would stay a zombie for the life of a process that
// serves stage after stage, and make every later hasChildren true. A
// killed process with several threads shows as a zombie before it can be
// collected, hence the wait.
func reapExited() {
	deadline := time.Now().Add(reapWait)
	for {
		var status unix.WaitStatus
		pid, err := unix.Wait4(-1, &status, unix.WNOHANG, nil)
		switch {
		case err == syscall.EINTR || pid > 0:
			continue
		case err != nil || time.Now().After(deadline): // ECHILD: none left
			return
		}
		time.Sleep(pollStep) // a child is still exiting
	}
}
