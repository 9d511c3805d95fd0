//go:build !linux

package sdk

// superviseDescendants does nothing and returns a channel that is never
// closed: this platform has no subreaper and no parent-death signal, so a
// process that left its group survives its stage, and a stage whose mspipe
// was killed keeps running.
func superviseDescendants() (parentGone <-chan struct{}, err error) {
	return make(chan struct{}), nil
}

// killDescendants does nothing: without a subreaper, processes that left
// their group cannot be found. mspipe still stops process groups whole.
func killDescendants() error { return nil }

// reapExited does nothing: without a subreaper no orphan is reparented to
// the plugin.
func reapExited() {}
