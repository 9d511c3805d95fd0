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

// BenchmarkExchange measures in-process Exchange of 8 ranks, each sending
// the bytes given in equal blocks to every rank: shm through staging
// memory, tcp over loopback.
func BenchmarkExchange(b *testing.B) {
	for _, name := range []string{"shm", "tcp"} {
		for _, size := range []int{4 << 10, 344 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("%s/n=8/%dKiB", name, size>>10), func(b *testing.B) {
				const n = 8
				comms := benchJob(b, n, name)
				benchLoop(b, comms, 4*(size/4/n*n), func(r int, c *Comm) func() error {
					send, recv := make([][]float32, n), make([][]float32, n)
					for p := range n {
						send[p], recv[p] = make([]float32, size/4/n), make([]float32, size/4/n)
					}
					return func() error { return c.Exchange(context.Background(), send, recv) }
				})
			})
		}
	}
}

// BenchmarkGroupAllReduce measures in-process GroupAllReduce (Sum) of 8
// ranks in one group: shm through staging memory, tcp over loopback.
func BenchmarkGroupAllReduce(b *testing.B) {
	for _, name := range []string{"shm", "tcp"} {
		for _, size := range []int{4, 1280, 32 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/n=8/%dB", name, size), func(b *testing.B) {
				const n = 8
				comms := benchJob(b, n, name)
				all := []int{0, 1, 2, 3, 4, 5, 6, 7}
				benchLoop(b, comms, size, func(r int, c *Comm) func() error {
					buf := make([]float32, size/4)
					return func() error { return c.GroupAllReduce(context.Background(), buf, Sum, all) }
				})
			})
		}
	}
}

func benchJob(b *testing.B, n int, name string) []*Comm {
	return group(b, n, func(c *Config) {
		c.Transport = TransportTCP
		if name == "shm" {
			c.Transport = TransportShm
		}
	})
}

// benchLoop runs the call each rank's setup returns, once to warm up, then
// b.N times on every rank at once.
func benchLoop(b *testing.B, comms []*Comm, bytes int, setup func(r int, c *Comm) func() error) {
	calls := make([]func() error, len(comms))
	for r, c := range comms {
		calls[r] = setup(r, c)
	}
	mustAll(b, onAll(comms, func(r int, c *Comm) error { return calls[r]() }))
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	mustAll(b, onAll(comms, func(r int, c *Comm) error {
		for range b.N {
			if err := calls[r](); err != nil {
				return err
			}
		}
		return nil
	}))
}
