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
		state, group, ok := procStat(pid)
		if ok && group == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// procStat reads the state and process group of a process from
// /proc/<pid>/stat ("pid (comm) state ppid pgrp ...").
func procStat(pid int) (state byte, pgrp int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(data[end+1:])
	if len(fields) < 3 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(string(fields[2]))
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], pgrp, true
}
