package procgroup

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// setSupervisorDeathSignal sets the parent-death signal. A signal ignored
// here stays ignored in the child (SIGHUP under nohup): catching it, and
// dropping it, keeps this process deaf to it while the child starts with
// the default action. Once caught it no longer reads as ignored, so this
// happens once.
func setSupervisorDeathSignal(cmd *exec.Cmd, sig syscall.Signal) {
	cmd.SysProcAttr.Pdeathsig = sig
	if signal.Ignored(sig) {
		signal.Notify(make(chan os.Signal, 1), sig)
	}
}
