package procgroup

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// setDeathSignal kills the leader when the thread that started it exits,
// which covers mspipe being killed with SIGKILL.
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// Alive reports whether a process of the group can still run. Zombies do
// not count: an orphan's zombie may wait for a reaper that never comes (a
// container without an init), and it cannot do anything.
func Alive(pgid int) bool {
	if !groupExists(pgid) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procStat(pid)
		if ok && st.pgrp == pgid && st.state != 'Z' && st.state != 'X' {
			return true
		}
	}
	return false
}

// stat is what mspipe reads of /proc/<pid>/stat.
type stat struct {
	state      byte
	ppid, pgrp int
}

// procStat reads the state, parent and process group of a process from
// /proc/<pid>/stat ("pid (comm) state ppid pgrp ...").
func procStat(pid int) (stat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return stat{}, false
	}
	fields := bytes.Fields(data[end+1:])
	if len(fields) < 3 || len(fields[0]) != 1 {
		return stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(fields[1]))
	pgrp, err2 := strconv.Atoi(string(fields[2]))
	if err1 != nil || err2 != nil {
		return stat{}, false
	}
	return stat{state: fields[0][0], ppid: ppid, pgrp: pgrp}, true
}
