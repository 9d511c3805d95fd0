//go:build !linux

package collective

import (
	"errors"
	"time"
)

// shmSupported reports whether this platform has the shared-memory
// transport; elsewhere every collective goes over TCP.
const shmSupported = false

var errNoShm = errors.New("shared memory transport needs Linux")

func mapShared(path string, size int, create bool) ([]byte, error) { return nil, errNoShm }
func unmap(b []byte)                                               {}
func privatize(b []byte) error                                     { return errNoShm }
func futexWait(addr *uint32, val uint32, d time.Duration)          {}
func futexWakeAll(addr *uint32)                                    {}
func ring(bell *uint32)                                            {}
