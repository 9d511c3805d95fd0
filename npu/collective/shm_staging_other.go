//go:build !linux

package collective

import "os"

func mapSparse(path string, size int, create bool) ([]byte, *os.File, error) {
	return nil, nil, errNoShm
}

func commitRange(f *os.File, off, n int64) error { return errNoShm }
