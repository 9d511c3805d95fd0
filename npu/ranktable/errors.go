package ranktable

import "errors"

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalid is wrapped by Problems.Err when a rank table has at least
	// one error-level problem.
	ErrInvalid = errors.New("invalid rank table")

	// ErrTooLarge reports a file larger than MaxFileSize. No rank table comes
	// close: 16 MiB holds well over 100 000 devices.
	ErrTooLarge = errors.New("rank table file too large")

	// ErrOptions reports GenerateOptions that describe no valid HCCL cluster.
	ErrOptions = errors.New("invalid rank table options")
)
