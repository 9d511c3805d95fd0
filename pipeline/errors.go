package pipeline

import (
	"errors"
	"fmt"
)

var (
	// ErrCorruptState is returned for a run.json that does not parse or
	// does not agree with its spec; such a state is reported, not trusted.
	ErrCorruptState = errors.New("corrupt run state")
	// ErrRunNotFound is returned for a run id with no run directory.
	ErrRunNotFound = errors.New("run not found")
	// ErrStageFailed is wrapped by the error Run returns when a stage failed.
	ErrStageFailed = errors.New("stage failed")
	// ErrNothingToResume is returned by Resume for a run that succeeded.
	ErrNothingToResume = errors.New("nothing to resume")
	// ErrRunLocked is returned by Run and Resume for a run directory that
	// another live mspipe process is writing to; its text names that pid.
	ErrRunLocked = errors.New("run is in use")
)

// ErrTimeout is wrapped by the error of a stage attempt that ran past the
// stage's timeout; its text reads "timed out after <timeout>".
var ErrTimeout = errors.New("timed out")

// StageError is why a stage failed: errors.As finds it in the error
// Engine.Run and Engine.Resume return when a stage failed. run.json keeps
// the cause's text as the stage's reason.
type StageError struct {
	Stage   string
	Attempt int // the attempt that failed last; 0 when the stage failed before its plugin started
	Err     error
}

func (e *StageError) Error() string {
	return fmt.Sprintf("stage %s failed: %v", e.Stage, e.Err)
}

func (e *StageError) Unwrap() error { return e.Err }
