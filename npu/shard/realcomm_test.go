package shard

import (
	"testing"

	"github.com/mspipe/mspipe/npu/collective/collectivetest"

	"github.com/mspipe/mspipe/npu/collective"
)

// realComms connects n in-process ranks through npu/collective with the
// given transport.
func realComms(t *testing.T, n int, transport collective.Transport) []Comm {
	t.Helper()
	out := make([]Comm, n)
	for i, c := range collectivetest.Group(t, n, transport) {
		out[i] = c
	}
	return out
}
