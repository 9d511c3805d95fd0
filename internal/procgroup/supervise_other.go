//go:build !linux

package procgroup

import (
	"os/exec"
	"syscall"
)

// setSupervisorDeathSignal does nothing: only Linux has a parent-death
// signal.
func setSupervisorDeathSignal(*exec.Cmd, syscall.Signal) {}
