//go:build !linux

package launch

import "os/exec"

// softDeathSignal does nothing: only Linux has a parent-death signal.
func softDeathSignal(*exec.Cmd) {}
