//go:build !unix

package atomicfile

// Lock is a no-op where flock is not available: one writer per target is
// then up to the user. (mspipe runs on Linux; this keeps other builds
// compiling.)
func Lock(target string) (unlock func(), err error) { return func() {}, nil }

// CheckSpace does not check where statfs is not available.
func CheckSpace(dir string, need int64) error { return nil }
