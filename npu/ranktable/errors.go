package ranktable

import "errors"

// Sentinel errors, matched with errors.Is.
var (
	// ErrTooLarge reports a file larger than MaxFileSize. No rank table comes
	// close: 16 MiB holds well over 100 000 devices.
	ErrTooLarge = errors.New("rank table file too large")

	// ErrOptions reports GenerateOptions that describe no valid HCCL cluster.
	ErrOptions = errors.New("invalid rank table options")
)

// CodeSyntax is the diagnostic code of a file that is not valid JSON.
const CodeSyntax = "json-syntax"
