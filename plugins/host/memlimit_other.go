//go:build !linux

package host

import "errors"

func limitMemory(int, int64) error {
	return errors.New("memory limits are applied on Linux only")
}
