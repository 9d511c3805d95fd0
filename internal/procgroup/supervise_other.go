//go:build !linux

package procgroup

import "os/exec"

// setSupervisorDeathSignal does nothing: only Linux has a parent-death
// signal.
func setSupervisorDeathSignal(*exec.Cmd) {}

// Supervise does nothing and returns a channel that is never closed: no
// subreaper and no parent-death signal on this platform, so a process that
// leaves its group, and a stage whose mspipe was killed, keep running.
func Supervise() (parentGone <-chan struct{}, err error) {
	return make(chan struct{}), nil
}

// KillDescendants does nothing here: without Supervise, processes that
// left their group cannot be found. Process groups are still stopped as a
// whole (Stop).
func KillDescendants() error { return nil }
