package collectivetest

import (
	"context"
	"sync"
	"testing"

	"github.com/mspipe/mspipe/npu/collective"
)

// TestGroupReduces: the ranks Group starts are one job, whose AllReduce
// sums what every rank holds, over either transport.
func TestGroupReduces(t *testing.T) {
	for _, transport := range []collective.Transport{collective.TransportTCP, collective.TransportShm} {
		t.Run(transport.String(), func(t *testing.T) {
			const n = 3
			comms := Group(t, n, transport)
			if len(comms) != n {
				t.Fatalf("%d communicators, want %d", len(comms), n)
			}
			bufs := make([][]float32, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				if c.Rank() != r || c.Size() != n || c.Transport() != transport {
					t.Fatalf("rank %d: Rank %d, Size %d, transport %v", r, c.Rank(), c.Size(), c.Transport())
				}
				bufs[r] = []float32{float32(r), 10 * float32(r+1)}
				wg.Add(1)
				go func() { defer wg.Done(); errs[r] = c.AllReduce(context.Background(), bufs[r], collective.Sum) }()
			}
			wg.Wait()
			for r := range n {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if bufs[r][0] != 3 || bufs[r][1] != 60 {
					t.Errorf("rank %d holds %v, want [3 60]", r, bufs[r])
				}
			}
		})
	}
}
