package plugins

import "errors"

// Sentinel errors of the protocol; test with errors.Is. The host adds its
// own (discovery, launch, registry) in plugins/host.
var (
	// ErrPluginExited means the plugin process went away while the host was
	// talking to it (crash, exit, kill). The host's error text adds the exit
	// status and, for a Go panic, the panic message.
	ErrPluginExited = errors.New("plugin process exited")
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
)
