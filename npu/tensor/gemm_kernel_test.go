package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

var allGemmArches = []gemmArch{archGeneric, archAVX2, archAVX512}

// archCases are shapes that reach every part of the packed driver: tile
// edges in m and n (primes, and short panels of 2, 4 and 8 rows that have
// kernels of their own), B read in place (few rows) or packed, several K blocks (k > gemmKC, with beta applied
// once), several A and B blocks (m > gemmMC, n > gemmNC), 1×1, tall and
// skinny products and padded leading dimensions.
func archCases() []gemmCase {
	var cases []gemmCase
	for _, s := range [][3]int{
		{1, 1, 1}, {1, 1, 300}, {2, 3, 5}, {13, 17, 19}, {12, 32, 256}, {6, 16, 7},
		{37, 41, 600}, {251, 67, 43}, {29, 530, 31}, {300, 3, 257}, {1, 700, 2}, {700, 1, 2},
		{97, 101, 513}, {20, 33, 70}, {16, 64, 40}, {8, 96, 9},
	} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				cases = append(cases, gemmCase{ta, tb, s[0], s[1], s[2], 1, 0, 0})
			}
		}
	}
	return append(cases,
		gemmCase{false, false, 61, 67, 600, 0.5, 0.25, 3},
		gemmCase{true, true, 61, 67, 600, -2, 1, 5},
		gemmCase{false, true, 250, 45, 270, 1, -1, 1},
		gemmCase{true, false, 45, 250, 270, 1.5, 2, 7},
		gemmCase{false, false, 13, 520, 5, 1, 0.5, 2},
	)
}

// TestGemmArchesMatchReference runs every kernel family this CPU supports
// (forced, whatever bestGemmArch picks) against the float64 reference, and
// checks that one, two and three workers give the same bits as the nil path.
func TestGemmArchesMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	pools := []*Workers{NewWorkers(1), NewWorkers(2), NewWorkers(3)}
	defer func() {
		for _, w := range pools {
			w.Close()
		}
	}()
	for _, tc := range archCases() {
		a, lda, b, ldb, c0, ldc := tc.operands(r)
		want := append([]float32(nil), c0...)
		gemmReference(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
		for _, arch := range allGemmArches {
			name := fmt.Sprintf("%v/%t%t_%dx%dx%d_a%g_b%g_pad%d", arch, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.pad)
			t.Run(name, func(t *testing.T) {
				if !gemmArchSupported(arch) {
					t.Skipf("%v not supported on this CPU", arch)
				}
				serial := append([]float32(nil), c0...)
				var nilPool *Workers
				nilPool.runGemm(arch, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, serial, ldc)
				tol := 1e-6 * float64(tc.k+2)
				for i := 0; i < tc.m; i++ {
					for j := 0; j < ldc; j++ {
						idx := i*ldc + j
						if j >= tc.n {
							if serial[idx] != c0[idx] {
								t.Fatalf("padding element (%d,%d) written", i, j)
							}
							continue
						}
						scale := 1 + math.Abs(float64(want[idx]))
						if d := math.Abs(float64(serial[idx]-want[idx])) / scale; d > tol {
							t.Fatalf("C[%d,%d] = %g, want %g", i, j, serial[idx], want[idx])
						}
					}
				}
				for _, w := range pools {
					got := append([]float32(nil), c0...)
					w.runGemm(arch, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, got, ldc)
					for idx := range got {
						if math.Float32bits(got[idx]) != math.Float32bits(serial[idx]) {
							t.Fatalf("%d workers: C[%d,%d] = %g, nil pool gave %g", w.N(), idx/ldc, idx%ldc, got[idx], serial[idx])
						}
					}
				}
			})
		}
	}
}

// TestGemmBitsIgnoreTileBoundaries computes blocks of C as products of
// their own (sub-matrices of A and B at odd offsets, so micro-tile edges fall
// elsewhere) and requires the same bits as the whole product: an element's
// value must not depend on where a tile or a worker's piece ends.
func TestGemmBitsIgnoreTileBoundaries(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const m, n, k = 70, 90, 300
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	for _, arch := range allGemmArches {
		if !gemmArchSupported(arch) {
			continue
		}
		var w *Workers
		whole := make([]float32, m*n)
		w.runGemm(arch, false, false, m, n, k, 1, a, k, b, n, 0, whole, n)
		for _, blk := range [][4]int{{0, 0, 1, 1}, {5, 7, 13, 29}, {11, 33, 59, 57}, {69, 89, 1, 1}, {1, 0, 12, 90}, {3, 5, 8, 40}, {2, 9, 4, 33}, {60, 0, 10, 64}} {
			i0, j0, bm, bn := blk[0], blk[1], blk[2], blk[3]
			part := make([]float32, bm*bn)
			w.runGemm(arch, false, false, bm, bn, k, 1, a[i0*k:], k, b[j0:], n, 0, part, bn)
			for i := 0; i < bm; i++ {
				for j := 0; j < bn; j++ {
					if math.Float32bits(part[i*bn+j]) != math.Float32bits(whole[(i0+i)*n+j0+j]) {
						t.Fatalf("%v: block at (%d,%d): C[%d,%d] = %g, whole product gave %g",
							arch, i0, j0, i0+i, j0+j, part[i*bn+j], whole[(i0+i)*n+j0+j])
					}
				}
			}
		}
	}
}

// TestGemmPackFastPathsMatchGo checks the assembly packing against the Go
// loops it replaces, for every width a kernel uses.
func TestGemmPackFastPathsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, arch := range []gemmArch{archAVX2, archAVX512} {
		if !gemmArchSupported(arch) {
			continue
		}
		for _, width := range []int{32, 16, 12, 6} {
			for _, rows := range []int{1, 3, 4, 5, 257} {
				ld := width + 3
				src := randSlice(r, (rows-1)*ld+width)
				want, got := make([]float32, rows*width), make([]float32, rows*width)
				packCopyGo(want, src, ld, rows, width, width)
				if !packCopy(arch, got, src, ld, rows, width) {
					t.Fatalf("%v: no copy fast path for width %d", arch, width)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%v copy width %d rows %d: dst[%d] = %g, want %g", arch, width, rows, i, got[i], want[i])
					}
				}
				// Transposed: rows plays k; width rows of src, each ld apart.
				tsrc := randSlice(r, (width-1)*(rows+2)+rows)
				packTransGo(want, tsrc, rows+2, rows, width, width)
				if !packTrans(arch, got, tsrc, rows+2, rows, width) {
					t.Fatalf("%v: no transpose fast path", arch)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%v transpose w %d k %d: dst[%d] = %g, want %g", arch, width, rows, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestGemmAllocatesNothing holds every entry point to no allocation once
// warm: the nil pool packs on its stack, pools keep their buffers.
func TestGemmAllocatesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const m, n, k = 100, 300, 200
	a, b, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
	w1, w2 := NewWorkers(1), NewWorkers(2)
	defer w1.Close()
	defer w2.Close()
	for _, tc := range []struct {
		name string
		run  func()
	}{
		{"nil", func() { Gemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n) }},
		{"w1", func() { w1.Gemm(true, false, m, n, k, 1, a, m, b, n, 1, c, n) }},
		{"w2", func() { w2.Gemm(false, false, m, n, k, 1, a, k, b, n, 0.5, c, n) }},
	} {
		if allocs := testing.AllocsPerRun(5, tc.run); allocs != 0 {
			t.Errorf("%s: %v allocations per product", tc.name, allocs)
		}
	}
}

// BenchmarkGemmArch runs a 512³ product on one goroutine with each kernel
// family this CPU supports.
func BenchmarkGemmArch(b *testing.B) {
	const n = 512
	r := rand.New(rand.NewPCG(3, 4))
	a, bb, c := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
	for _, arch := range allGemmArches {
		b.Run(arch.String(), func(b *testing.B) {
			if !gemmArchSupported(arch) {
				b.Skipf("%v not supported here", arch)
			}
			w := NewWorkers(1)
			defer w.Close()
			for b.Loop() {
				w.runGemm(arch, false, false, n, n, n, 1, a, n, bb, n, 0, c, n)
			}
			b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGemmBlock measures the micro-kernel alone: one packed A block
// (gemmMC×gemmKC) against one packed B block (gemmKC×gemmNC), as the driver
// runs them between packings.
func BenchmarkGemmBlock(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, arch := range allGemmArches {
		b.Run(arch.String(), func(b *testing.B) {
			if !gemmArchSupported(arch) {
				b.Skipf("%v not supported here", arch)
			}
			s := gemmScratch{a: randSlice(r, gemmMC*gemmKC), b: randSlice(r, gemmKC*gemmNC), mc: gemmMC, nc: gemmNC}
			c := make([]float32, gemmMC*gemmNC)
			var j gemmJob
			j.set(arch, false, false, gemmMC, gemmNC, gemmKC, 1, nil, gemmKC, nil, gemmNC, 1, c, gemmNC)
			for b.Loop() {
				j.block(&s, 0, gemmMC, 0, gemmNC, 0, gemmKC, 1, false)
			}
			b.ReportMetric(2*float64(gemmMC*gemmNC*gemmKC)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGemmPack measures packing one A block and one B block in each
// storage order, in elements packed per nanosecond.
func BenchmarkGemmPack(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	const ld = 1024
	src := randSlice(r, ld*ld)
	for _, arch := range []gemmArch{archAVX512, archAVX2} {
		for _, trans := range []bool{false, true} {
			s := gemmScratch{a: make([]float32, gemmMC*gemmKC), b: make([]float32, gemmKC*gemmNC), mc: gemmMC, nc: gemmNC}
			var j gemmJob
			j.set(arch, trans, trans, ld, ld, ld, 1, src, ld, src, ld, 0, nil, ld)
			b.Run(fmt.Sprintf("%v/A/trans=%t", arch, trans), func(b *testing.B) {
				for b.Loop() {
					j.packA(s.a, 0, gemmMC, 0, gemmKC)
				}
				b.ReportMetric(float64(gemmMC*gemmKC)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elem/ns")
			})
			b.Run(fmt.Sprintf("%v/B/trans=%t", arch, trans), func(b *testing.B) {
				for b.Loop() {
					j.packB(s.b, 0, gemmKC, 0, gemmNC)
				}
				b.ReportMetric(float64(gemmNC*gemmKC)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elem/ns")
			})
		}
	}
}

// FuzzGemm runs fuzzed shapes, transposes, paddings and scalars through
// every kernel family this CPU supports: each must match the float64
// reference, and a pool of two must give the nil pool's bits.
func FuzzGemm(f *testing.F) {
	f.Add(uint8(1), uint8(1), uint16(1), uint8(0), uint8(0), int8(2), int8(0), uint64(1))
	f.Add(uint8(13), uint8(33), uint16(300), uint8(3), uint8(1), int8(-3), int8(1), uint64(2))
	f.Add(uint8(16), uint8(70), uint16(520), uint8(2), uint8(5), int8(1), int8(-2), uint64(3))
	w2 := NewWorkers(2)
	defer w2.Close()
	f.Fuzz(func(t *testing.T, m, n uint8, k uint16, trans, pad uint8, alpha, beta int8, seed uint64) {
		tc := gemmCase{transA: trans&1 != 0, transB: trans&2 != 0, m: int(m % 80), n: int(n % 80), k: int(k % 700),
			alpha: float32(alpha) / 2, beta: float32(beta) / 4, pad: int(pad % 8)}
		r := rand.New(rand.NewPCG(seed, 1))
		a, lda, b, ldb, c0, ldc := tc.operands(r)
		want := append([]float32(nil), c0...)
		gemmReference(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
		for _, arch := range allGemmArches {
			if !gemmArchSupported(arch) {
				continue
			}
			got, par := append([]float32(nil), c0...), append([]float32(nil), c0...)
			var w *Workers
			w.runGemm(arch, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, got, ldc)
			w2.runGemm(arch, tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, par, ldc)
			tol := 1e-6 * float64(tc.k+2) * (1 + math.Abs(float64(tc.alpha)))
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(par[i]) {
					t.Fatalf("%v %+v: C[%d] nil pool %g, two workers %g", arch, tc, i, got[i], par[i])
				}
				if d := math.Abs(float64(got[i]-want[i])) / (1 + math.Abs(float64(want[i]))); d > tol {
					t.Fatalf("%v %+v: C[%d] = %g, want %g", arch, tc, i, got[i], want[i])
				}
			}
		}
	})
}
