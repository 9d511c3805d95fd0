//go:build !linux

package netns

import (
	"errors"
	"testing"
)

// errUnsupported is what every operation reports off Linux.
var errUnsupported = errors.New("network namespaces are Linux only")

// Available reports that network namespaces are Linux only.
func Available() error { return errUnsupported }

// New fails the test: call Available first to skip instead.
func New(tb testing.TB, hosts, devicesPerHost int) *Cluster {
	tb.Helper()
	tb.Fatalf("netns: %v", errUnsupported)
	return nil
}

// Do reports that network namespaces are Linux only.
func (c *Cluster) Do(host int, fn func() error) error { return errUnsupported }

// Processes reports that network namespaces are Linux only.
func (c *Cluster) Processes() ([]int, error) { return nil, errUnsupported }

// SetLink reports that network namespaces are Linux only.
func (c *Cluster) SetLink(host int, up bool) error { return errUnsupported }
