package launch

import (
	"os/exec"
	"syscall"
)

// softDeathSignal makes the launcher get SIGTERM rather than SIGKILL when
// mspipe dies: mpirun and srun stop their ranks on SIGTERM (srun cancels
// its job step on every host), which they cannot do when killed outright.
func softDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Pdeathsig != 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	}
}
