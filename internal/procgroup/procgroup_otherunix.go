//go:build unix && !linux

package procgroup

import "syscall"

// setDeathSignal does nothing: only Linux has a parent-death signal.
func setDeathSignal(*syscall.SysProcAttr) {}

// Alive reports whether any process of the group still exists. Zombies
// count; on these systems an orphan is reaped by init (launchd on macOS).
func Alive(pgid int) bool {
	return groupExists(pgid)
}
