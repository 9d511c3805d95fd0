//go:build !unix

package procgroup

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
)

// Prepare returns an error wrapping ErrUnsupported: without process groups
// mspipe could not stop what a command starts.
func Prepare(cmd *exec.Cmd) error {
	return fmt.Errorf("start %s: %w (%s); run stages on Linux or macOS", cmd.Path, ErrUnsupported, runtime.GOOS)
}

// Signal returns an error wrapping ErrUnsupported.
func Signal(pgid int, sig syscall.Signal) error {
	return fmt.Errorf("signal process group %d: %w (%s)", pgid, ErrUnsupported, runtime.GOOS)
}

// Alive reports false: no group can have been started.
func Alive(int) bool { return false }
