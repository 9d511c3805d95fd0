package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// alignedAt returns a slice of n floats whose first element lies skip
// floats past a 32-byte boundary.
func alignedAt(n, skip int) []float32 {
	buf := make([]float32, n+skip+8)
	a := int(uintptr(unsafe.Pointer(&buf[0])) % 32 / 4)
	start := (8-a)%8 + skip
	return buf[start : start+n : start+n]
}

// sumBroadcastWant is SumBroadcast's definition, one element at a time.
func sumBroadcastWant(srcs [][]float32, divisor float32) []float32 {
	want := make([]float32, len(srcs[0]))
	for i := range want {
		s := srcs[0][i]
		for _, src := range srcs[1:] {
			s += src[i]
		}
		if divisor != 0 {
			s /= divisor
		}
		want[i] = s
	}
	return want
}

// TestSumBroadcastPathsAgree runs the Go loop and the assembly kernel (when
// this CPU has it) on the same inputs, 1 to 8 sources of odd and even
// lengths at every alignment, destinations sharing an alignment or not, and
// requires both to give the definition's bits exactly.
func TestSumBroadcastPathsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	paths := []bool{false}
	if useSumAsm() {
		paths = append(paths, true)
	}
	for k := 1; k <= 8; k++ {
		for _, n := range []int{0, 1, 7, 63, 64, 65, 71, 129, 200, 1031, 4099} {
			for _, skip := range [][2]int{{0, 0}, {3, 3}, {5, 1}, {7, 2}} {
				srcs := make([][]float32, k)
				for i := range srcs {
					// Magnitudes apart, so a different order of additions
					// would change the bits.
					srcs[i] = alignedAt(n, (i+skip[0])%8)
					for j := range srcs[i] {
						srcs[i][j] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3)))
					}
				}
				for _, divisor := range []float32{0, float32(math.Copysign(0, -1)), float32(k), 3} {
					want := sumBroadcastWant(srcs, divisor)
					for _, asm := range paths {
						name := fmt.Sprintf("k%d/n%d/skip%v/div%g/asm%t", k, n, skip, divisor, asm)
						dsts := [][]float32{alignedAt(n, skip[0]), alignedAt(n, skip[1]), alignedAt(n, skip[0])}
						if asm && skip[0] == skip[1] && n >= 8+SumBroadcastBlock {
							// Destinations that share an alignment must take the kernel.
							if done := sumBroadcastAsm(dsts, srcs, divisor); done < n-SumBroadcastBlock-7 {
								t.Fatalf("%s: kernel did %d of %d elements", name, done, n)
							}
						}
						sumBroadcast(asm, dsts, srcs, divisor)
						for d, dst := range dsts {
							for i := range dst {
								if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
									t.Fatalf("%s: dsts[%d][%d] = %g, want %g", name, d, i, dst[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestSumBroadcastInPlace stores the result into the sources themselves,
// as AllReduce does into every rank's buffer.
func TestSumBroadcastInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, asm := range []bool{false, true} {
		if asm && !useSumAsm() {
			continue
		}
		for _, n := range []int{5, 64, 1000, 70001} {
			bufs := make([][]float32, 4)
			for i := range bufs {
				bufs[i] = alignedAt(n, 1)
				for j := range bufs[i] {
					bufs[i][j] = float32(r.NormFloat64())
				}
			}
			want := sumBroadcastWant(bufs, 4)
			sumBroadcast(asm, bufs, bufs, 4)
			for b, buf := range bufs {
				for i := range buf {
					if math.Float32bits(buf[i]) != math.Float32bits(want[i]) {
						t.Fatalf("asm %t n %d: bufs[%d][%d] = %g, want %g", asm, n, b, i, buf[i], want[i])
					}
				}
			}
		}
	}
}

func TestSumBroadcastAllocatesNothing(t *testing.T) {
	srcs, dsts := make([][]float32, 8), make([][]float32, 8)
	for i := range srcs {
		srcs[i], dsts[i] = alignedAt(5000, 0), alignedAt(5000, 0)
	}
	if a := testing.AllocsPerRun(10, func() { SumBroadcast(dsts, srcs, 8) }); a != 0 {
		t.Fatalf("SumBroadcast allocates %v times per call", a)
	}
}

func TestSumBroadcastPanicsOnLengths(t *testing.T) {
	for _, tc := range []struct {
		name       string
		dsts, srcs [][]float32
	}{
		{"no sources", [][]float32{make([]float32, 3)}, nil},
		{"short source", [][]float32{make([]float32, 3)}, [][]float32{make([]float32, 2)}},
		{"short destination", [][]float32{make([]float32, 3), make([]float32, 2)}, [][]float32{make([]float32, 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			SumBroadcast(tc.dsts, tc.srcs, 0)
		})
	}
}

// BenchmarkSumBroadcast reduces 8 buffers of one AllReduce piece (64K
// floats) in place, as an 8-rank shared-memory AllReduce does, through
// each path.
func BenchmarkSumBroadcast(b *testing.B) {
	const k, n = 8, 1 << 16
	bufs := make([][]float32, k)
	for i := range bufs {
		bufs[i] = alignedAt(n, 0)
		for j := range bufs[i] {
			bufs[i][j] = float32(j%97) / 8
		}
	}
	for _, asm := range []bool{false, true} {
		b.Run(fmt.Sprintf("asm=%t", asm), func(b *testing.B) {
			if asm && !useSumAsm() {
				b.Skip("no AVX2")
			}
			for b.Loop() {
				sumBroadcast(asm, bufs, bufs, k) // a mean keeps the values in range
			}
			// Each element is read from every buffer and written to every one.
			b.ReportMetric(float64(2*k*n*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
