//go:build unix

package procgroup

import (
	"errors"
	"os/exec"
	"syscall"
)

// Prepare makes cmd, which must not have been started, start as the leader
// of a new process group whose id is its pid (and, on Linux, die with the
// thread that started it). It keeps the other attributes cmd already has.
func Prepare(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	setDeathSignal(cmd.SysProcAttr)
	return nil
}

// Signal sends sig to every process of the group pgid; a group that is
// already gone is not an error.
func Signal(pgid int, sig syscall.Signal) error {
	if pgid <= 0 {
		return errors.New("no process group")
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// groupExists reports whether any process, zombies included, is in the
// group.
func groupExists(pgid int) bool {
	return pgid > 0 && !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}
