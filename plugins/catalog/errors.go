package catalog

import "errors"

// ErrNotImplemented means a built-in stage ships only as a declaration in
// this build: specs using it validate, running it fails. Test with
// errors.Is. Errors of discovery and launch are package host's.
var ErrNotImplemented = errors.New("declared but not implemented in this build")
