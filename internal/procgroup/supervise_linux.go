package procgroup

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var unignoreHangup sync.Once

// hangupSignal is a supervisor's parent-death signal: one Go programs exit
// on by default, so a supervisor that does not call Supervise still dies
// with its parent.
const hangupSignal = syscall.SIGHUP

// setSupervisorDeathSignal sets SIGHUP as the parent-death signal. A
// signal ignored here stays ignored in the child (mspipe under nohup):
// catching SIGHUP, and dropping it, keeps this process deaf to hangups
// while the child starts with the default action.
func setSupervisorDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr.Pdeathsig = hangupSignal
	unignoreHangup.Do(func() {
		if signal.Ignored(hangupSignal) {
			signal.Notify(make(chan os.Signal, 1), hangupSignal)
		}
	})
}

// Supervise makes the calling process a child subreaper
// (PR_SET_CHILD_SUBREAPER): a descendant whose parent exits is reparented
// to it rather than to init, even one that called setsid, so every process
// started below it stays below it and KillDescendants can find it. The
// returned channel is closed when SIGHUP arrives: the parent-death signal
// of PrepareSupervisor, meaning mspipe is gone. The caller then kills its
// descendants and exits.
func Supervise() (parentGone <-chan struct{}, err error) {
	gone := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, hangupSignal)
	go func() {
		<-sig
		close(gone)
	}()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return gone, fmt.Errorf("become the reaper of this process's descendants: %w", err)
	}
	return gone, nil
}

// KillDescendants sends SIGKILL to every live descendant of this process,
// again and again until none is left (what a dying process started is
// reparented here when this process is a subreaper, see Supervise), for at
// most killDescendantsWait. Zombies are left to whoever reaps them.
func KillDescendants() error {
	deadline := time.Now().Add(killDescendantsWait)
	for {
		pids := descendants(os.Getpid())
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive %v after SIGKILL", pids, killDescendantsWait)
		}
		time.Sleep(pollStep)
	}
}

// descendants lists the live (not zombie) descendants of root from /proc.
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
		st, ok := procStat(pid)
		if !ok {
			continue
		}
		children[st.ppid] = append(children[st.ppid], pid)
		live[pid] = st.state != 'Z' && st.state != 'X'
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
