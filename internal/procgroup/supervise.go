package procgroup

import (
	"os/exec"
	"syscall"
)

// PrepareSupervisor is Prepare for a process that takes down what it
// starts when its parent dies: mspipe's stage plugins (plugins/sdk). Its
// parent-death signal (Linux) is deathSignal instead of SIGKILL, which the
// process catches to kill its descendants before it exits; deathSignal
// should be one a process that does not catch it exits on.
func PrepareSupervisor(cmd *exec.Cmd, deathSignal syscall.Signal) error {
	if err := Prepare(cmd); err != nil {
		return err
	}
	setSupervisorDeathSignal(cmd, deathSignal)
	return nil
}
