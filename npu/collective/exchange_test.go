package collective

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// smallJob starts an n-rank job with 1 KiB frames over TCP only ("tcp") or
// with shared memory among its ranks ("shm"), whose TCP mesh carries
// point-to-point frames.
func smallJob(t *testing.T, n int, transport string) []*Comm {
	t.Helper()
	if transport == "tcp" {
		return group(t, n, func(c *Config) { smallSegments(Mesh)(c); c.Transport = TransportTCP })
	}
	dir := shmDir(t)
	comms := group(t, n, func(c *Config) { smallSegments(Mesh)(c); c.Transport, c.ShmDir = TransportShm, dir })
	for r, c := range comms {
		if n > 1 && c.Transport() != TransportShm {
			t.Fatalf("rank %d uses %v, want shm", r, c.Transport())
		}
	}
	return comms
}

// block is the data rank from sends to rank to in an exchange with seed.
func block(seed uint64, from, to, length int) []float32 {
	b := make([]float32, length)
	for i := range b {
		b[i] = value(seed, from, to<<24+i, Sum)
	}
	return b
}

// runExchange exchanges blocks of lens[from][to] elements on every rank and
// checks every received block bit for bit against what its sender sent.
func runExchange(t *testing.T, comms []*Comm, lens [][]int, seed uint64) {
	t.Helper()
	n := len(comms)
	recvs := make([][][]float32, n)
	mustAll(t, onAll(comms, func(r int, c *Comm) error {
		send := make([][]float32, n)
		recvs[r] = make([][]float32, n)
		for p := range n {
			send[p] = block(seed, r, p, lens[r][p])
			recvs[r][p] = make([]float32, lens[p][r])
		}
		if seed%2 == 1 {
			recvs[r][r] = send[r] // the own block in place
		}
		return c.Exchange(context.Background(), send, recvs[r])
	}))
	for r := range n {
		for p := range n {
			if i := sameBits(recvs[r][p], block(seed, p, r, lens[p][r])); i >= 0 {
				t.Fatalf("seed %d: rank %d's block from rank %d (%d elements): element %d differs", seed, r, p, lens[p][r], i)
			}
		}
	}
}

// Exchange delivers every pair's block intact, whatever the per-pair
// lengths: zero, a fraction of a frame, many frames, and more than
// maxSegments frames of the configured size; several calls in a row,
// including one where nothing moves.
func TestExchange(t *testing.T) {
	for _, transport := range []string{"tcp", "shm"} {
		for _, n := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%s/n=%d", transport, n), func(t *testing.T) {
				comms := smallJob(t, n, transport)
				rng := rand.New(rand.NewPCG(uint64(n), 7))
				for round := range 4 {
					lens := make([][]int, n)
					for r := range lens {
						lens[r] = make([]int, n)
						for p := range lens[r] {
							switch {
							case round == 2: // nothing moves, every rank still takes part
							case rng.IntN(4) == 0:
							default:
								lens[r][p] = 1 + rng.IntN(3000) // up to 12 frames of 256 elements
							}
						}
					}
					if round == 3 && n > 1 {
						lens[0][n-1] = maxSegments*256 + 999 // larger segments than configured
						lens[n-1][0] = 1
					}
					runExchange(t, comms, lens, uint64(round))
				}
			})
		}
	}
}

// With the default 1 MiB frames, a block of more than one frame arrives
// intact.
func TestExchangeLargeBlocks(t *testing.T) {
	comms := group(t, 2, nil)
	const big = DefaultSegmentBytes/4*3 + 17
	runExchange(t, comms, [][]int{{5, big}, {big + 1, 0}}, 11)
}

// A receiver that expects another length than its sender sends fails at
// once with an error naming the sender and both lengths; the sender and
// the other ranks learn it from the receiver, during the call or at their
// next one. Nothing waits for a timeout
// (the job's timeout is long, and every failure names a cause other than
// silence).
func TestExchangeLengthMismatch(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sent, want int // rank 0 sends sent elements to rank 2, which expects want
	}{
		{"longer", 10, 12},
		{"shorter", 12, 10},
		{"unexpected", 5, 0},
		{"missing", 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			comms := group(t, n, nil)
			errs := onAll(comms, func(r int, c *Comm) error {
				send, recv := make([][]float32, n), make([][]float32, n)
				for p := range n {
					send[p], recv[p] = make([]float32, 4), make([]float32, 4)
				}
				switch r {
				case 0:
					send[2] = make([]float32, tc.sent)
				case 2:
					recv[0] = make([]float32, tc.want)
				}
				return c.Exchange(context.Background(), send, recv)
			})
			detail := fmt.Sprintf("is out of step: in exchange #1 it sends %d elements to rank 2, which expects %d", tc.sent, tc.want)
			wantPeer(t, "rank 2", errs[2], 0, ErrOutOfStep)
			// Ranks 0 and 1 may have finished their part before the news
			// came; then their next call finds the communicator broken.
			for _, r := range []int{0, 1} {
				err := errs[r]
				if err == nil {
					err = comms[r].Barrier(context.Background())
				}
				wantPeer(t, fmt.Sprintf("rank %d", r), err, 0, ErrOutOfStep)
				// Rank 0 cannot notice itself; whoever told it says so.
				if r == 0 && !strings.Contains(err.Error(), "(reported by rank ") {
					t.Errorf("rank %d: %q does not say who noticed", r, err)
				}
				errs[r] = err
			}
			for r, err := range errs {
				if !strings.Contains(err.Error(), detail) {
					t.Errorf("rank %d: %q does not contain %q", r, err, detail)
				}
			}
		})
	}
}

func TestExchangeArgumentErrors(t *testing.T) {
	ctx := context.Background()
	buf := make([]float32, 12)
	two := func(a, b []float32) [][]float32 { return [][]float32{a, b} }
	for _, tc := range []struct {
		name       string
		send, recv [][]float32
		want       string
	}{
		{"blocks", two(buf[:1], buf[1:2]), [][]float32{make([]float32, 1)}, "send has 2 blocks and recv 1, want one per rank (2)"},
		{"own block", two(buf[:1], buf[1:2]), two(make([]float32, 2), make([]float32, 1)), "send[0] has 1 elements, recv[0] 2"},
		{"recv overlaps send", two(buf[:4], buf[4:8]), two(make([]float32, 4), buf[6:10]), "recv[1] overlaps send[1]"},
		{"recv overlaps recv", two(buf[:1], buf[1:2]), two(buf[4:5], buf[4:6]), "recv[0] overlaps recv[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := group(t, 2, nil)
			errs := onAll(comms, func(r int, c *Comm) error {
				if r == 0 {
					return c.Exchange(ctx, tc.send, tc.recv)
				}
				return c.Exchange(ctx, two(make([]float32, 1), make([]float32, 1)), two(make([]float32, 1), make([]float32, 1)))
			})
			if !errors.Is(errs[0], ErrBuffer) || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("rank 0: %v, want ErrBuffer containing %q", errs[0], tc.want)
			}
			wantPeer(t, "rank 1", errs[1], 0, ErrPeerAborted)
			if !strings.Contains(errs[1].Error(), tc.want) {
				t.Errorf("rank 1: %q does not carry rank 0's reason", errs[1])
			}
		})
	}
}
