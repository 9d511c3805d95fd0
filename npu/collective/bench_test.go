package collective

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkAllReduce measures in-process AllReduce (all ranks in this
// process, loopback TCP between them). Bytes are one rank's buffer, so
// MB/s is the algorithm bandwidth (algbw) of nccl-tests; bus bandwidth is
// algbw × 2(n-1)/n. For separate rank processes and a memcpy comparison
// run go run ./bench/collective.
func BenchmarkAllReduce(b *testing.B) {
	for _, alg := range []Algorithm{Mesh, Ring} {
		for _, n := range []int{2, 4, 8} {
			for _, size := range []int{4 << 10, 1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("%v/n=%d/%dKiB", alg, n, size>>10), func(b *testing.B) {
					benchAllReduce(b, n, size/4, alg)
				})
			}
		}
	}
}

func benchAllReduce(b *testing.B, n, count int, alg Algorithm) {
	comms := group(b, n, func(c *Config) { c.Algorithm = alg })
	start := make([]chan struct{}, n)
	done := make(chan error, n)
	for r := range comms {
		start[r] = make(chan struct{})
		buf := make([]float32, count)
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
