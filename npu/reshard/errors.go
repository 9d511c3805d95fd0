package reshard

import "errors"

// Errors wrapped by this package's functions, for errors.Is.
var (
	// ErrPlacement: a placement that does not match the files or does not
	// tile its tensor (wrong box count, shapes, overlaps, holes).
	ErrPlacement = errors.New("placement does not match the checkpoint")
	// ErrSource: a source set that is not one job's checkpoint (missing or
	// duplicated rank files, tensors absent from some ranks).
	ErrSource = errors.New("bad source set")
	// ErrMemory: the plan cannot run under Options.MaxMemory.
	ErrMemory = errors.New("over the memory cap")
	// ErrVerify: an output set does not match its manifest.
	ErrVerify = errors.New("verification failed")
)
