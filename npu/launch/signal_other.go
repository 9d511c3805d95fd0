//go:build !unix

package launch

// continueGroup does nothing: without Unix signals no process is stopped.
func continueGroup(*proc) {}
