package sdk

import "errors"

// ErrNotLaunched means the plugin binary was run directly instead of by
// mspipe; the error returned by ServeContext explains what to do instead.
var ErrNotLaunched = errors.New("not started by mspipe")

// errShuttingDown refuses a Run that arrives after the plugin was told to stop.
var errShuttingDown = errors.New("plugin is shutting down")
