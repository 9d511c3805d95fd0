package collective

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkAllReduce measures in-process AllReduce (all ranks in this
// process): shm through shared memory with buffers from Alloc, mesh and
// ring over loopback TCP. Bytes are one rank's buffer, so MB/s is the
// algorithm bandwidth (algbw) of nccl-tests; bus bandwidth is
// algbw × 2(n-1)/n. For separate rank processes and a memcpy comparison
// run go run ./bench/collective.
func BenchmarkAllReduce(b *testing.B) {
	for _, name := range []string{"shm", "mesh", "ring"} {
		for _, n := range []int{2, 4, 8} {
			for _, size := range []int{4 << 10, 1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("%s/n=%d/%dKiB", name, n, size>>10), func(b *testing.B) {
					benchAllReduce(b, n, size/4, name)
				})
			}
		}
	}
}

func benchAllReduce(b *testing.B, n, count int, name string) {
	comms := group(b, n, func(c *Config) {
		c.Transport = TransportTCP
		switch name {
		case "shm":
			c.Transport = TransportShm
		case "ring":
			c.Algorithm = Ring
		}
	})
	bufs := make([][]float32, n)
	mustAll(b, onAll(comms, func(r int, c *Comm) error {
		var err error
		bufs[r], err = c.Alloc(context.Background(), count)
		return err
	}))
	start := make([]chan struct{}, n)
	done := make(chan error, n)
	for r := range comms {
		start[r] = make(chan struct{})
		buf := bufs[r]
		go func() {
			for range start[r] {
				done <- comms[r].AllReduce(context.Background(), buf, Sum)
			}
		}()
	}
	defer func() {
		for r := range start {
			close(start[r])
		}
	}()
	step := func() {
		for r := range start {
			start[r] <- struct{}{}
		}
		for range start {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	}
	step()
	b.SetBytes(int64(4 * count))
	b.ResetTimer()
	for b.Loop() {
		step()
	}
}
