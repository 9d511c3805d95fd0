package procgroup

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// ErrUnsupported means the platform has no Unix process groups.
var ErrUnsupported = errors.New("process groups are not supported on this platform")

// killWait bounds how long Stop waits for the leader after SIGKILL, and
// pollStep how often it looks whether the rest of the group has gone.
const (
	killWait = 5 * time.Second
	pollStep = 5 * time.Millisecond
)

// Stop ends the process group pgid whose leader's end closes exited: SIGTERM
// to the group, then, unless the leader has exited and no process of the
// group can run any more within grace, SIGKILL to the group. It returns once
// the leader has exited, or an error when it has not killWait (5s) after
// SIGKILL. A group that is already gone is not an error.
func Stop(pgid int, exited <-chan struct{}, grace time.Duration) error {
	if err := Signal(pgid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop process group %d: %w", pgid, err)
	}
	if waitGone(pgid, exited, grace) {
		return nil
	}
	if err := Signal(pgid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill process group %d: %w", pgid, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("process %d did not exit %v after SIGKILL", pgid, killWait)
	}
}

// waitGone waits until the leader has exited and no process of the group
// can run any more, or until grace has passed; it reports whether the group
// is gone.
func waitGone(pgid int, exited <-chan struct{}, grace time.Duration) bool {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		return false
	}
	tick := time.NewTicker(pollStep)
	defer tick.Stop()
	for Alive(pgid) {
		select {
		case <-tick.C:
		case <-timer.C:
			return false
		}
	}
	return true
}
