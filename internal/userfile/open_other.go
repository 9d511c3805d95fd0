//go:build !unix

package userfile

import "os"

// openFlags is empty where FIFOs cannot block an open.
const openFlags = 0

func clearNonblock(*os.File) error { return nil }
