package host

import "errors"

// Sentinel errors of discovery and launch; test with
// errors.Is. Errors of the protocol itself (a plugin that exited, a
// malformed reply, an incompatible plugin) are the plugins package's.
var (
	// ErrNotPlugin means the executable started but did not answer the
	// mspipe plugin handshake.
	ErrNotPlugin = errors.New("not an mspipe stage plugin")
	// ErrChecksumMismatch means the executable's SHA-256 differs from the
	// pin; the executable was not started.
	ErrChecksumMismatch = errors.New("plugin checksum mismatch")
	// ErrStartTimeout means the plugin did not complete the handshake in time.
	ErrStartTimeout = errors.New("plugin did not start in time")
	// ErrDuplicate means a stage name is registered twice.
	ErrDuplicate = errors.New("stage already registered")
	// ErrStageNotFound means `uses:` names no built-in stage and no plugin
	// binary.
	ErrStageNotFound = errors.New("stage not found")
)
