package collective

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A rank's barrier stamps stay those of its call's first barrier. The
// peers read them once past that barrier (sawBarrier), when the rank may
// already be at the call's next one: its arrival there, after it reduced,
// was once read as the time its data was ready (CallTimes.PeerStaged).
func TestBarrierStampsAreTheCallsFirst(t *testing.T) {
	comms := shmGroupOf(t, 2, shmDir(t))
	mustAll(t, onAll(comms, func(r int, c *Comm) error {
		return c.run(context.Background(), opAllReduce, 0, 0, func() error {
			if err := c.shmBarrier(); err != nil {
				return err
			}
			first := atomic.LoadInt64(c.shm.arrivalStamp(r))
			time.Sleep(time.Millisecond) // the clock moves on
			if err := c.shmBarrier(); err != nil {
				return err
			}
			if got := atomic.LoadInt64(c.shm.arrivalStamp(r)); got != first {
				return fmt.Errorf("arrival stamp moved by %v at the call's second barrier", time.Duration(got-first))
			}
			return nil
		})
	}))
}
