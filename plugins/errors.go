package plugins

import "errors"

// Sentinel errors of the plugin host, registry and discovery; test with errors.Is.
var (
	// ErrPluginExited means the plugin process went away while the host was
	// talking to it (crash, exit, kill). The error text adds the exit status
	// and, for a Go panic, the panic message.
	ErrPluginExited = errors.New("plugin process exited")
	// ErrNotPlugin means the executable started but did not answer the
	// mspipe plugin handshake.
	ErrNotPlugin = errors.New("not an mspipe stage plugin")
	// ErrChecksumMismatch means the executable's SHA-256 differs from the
	// pin; the executable was not started.
	ErrChecksumMismatch = errors.New("plugin checksum mismatch")
	// ErrStartTimeout means the plugin did not complete the handshake in time.
	ErrStartTimeout = errors.New("plugin did not start in time")
	// ErrIncompatible means the plugin speaks no protocol version the host
	// speaks, or describes itself in a way the host cannot use.
	ErrIncompatible = errors.New("incompatible plugin")
	// ErrBadReply means the plugin sent a malformed message.
	ErrBadReply = errors.New("malformed reply from plugin")
	// ErrBadOutput means the outputs of a run do not match the declared
	// output specs.
	ErrBadOutput = errors.New("outputs do not match the declared outputs")
	// ErrInvalidName means a stage name is empty or badly formed.
	ErrInvalidName = errors.New("invalid stage name")
	// ErrDuplicate means a stage name is registered twice.
	ErrDuplicate = errors.New("stage already registered")
	// ErrStageNotFound means `uses:` names no built-in stage and no plugin
	// binary.
	ErrStageNotFound = errors.New("stage not found")
)
