package procgroup

import (
	"os/exec"
	"time"
)

// killDescendantsWait bounds how long KillDescendants keeps killing what
// its descendants keep starting.
const killDescendantsWait = 5 * time.Second

// PrepareSupervisor is Prepare for a process that calls Supervise at its
// start: mspipe's stage plugins. Its parent-death signal (Linux) is SIGHUP
// instead of SIGKILL, which Supervise catches to kill every descendant
// before the process exits; a process that does not catch it exits on it.
func PrepareSupervisor(cmd *exec.Cmd) error {
	if err := Prepare(cmd); err != nil {
		return err
	}
	setSupervisorDeathSignal(cmd)
	return nil
}
