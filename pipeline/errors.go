package pipeline

import "errors"

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
)
