package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

type gemmCase struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	pad            int // extra leading-dimension padding
}

func gemmCases() []gemmCase {
	var cases []gemmCase
	shapes := [][3]int{
		{1, 1, 1}, {1, 1, 7}, {7, 1, 1}, {1, 13, 1}, {2, 3, 5}, {13, 17, 19}, {31, 37, 41},
		{1, 300, 3}, {300, 1, 3}, {3, 2, 700}, {64, 192, 256}, {65, 193, 257}, {16, 144, 2048},
		{144, 1000, 16}, {128, 7, 300}, {0, 5, 3}, {5, 0, 3}, {4, 5, 0},
	}
	for _, s := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				cases = append(cases, gemmCase{ta, tb, s[0], s[1], s[2], 1, 0, 0})
			}
		}
	}
	cases = append(cases,
		gemmCase{false, false, 9, 11, 13, 0.5, 1, 3},
		gemmCase{true, true, 9, 11, 13, -2, 0.25, 1},
		gemmCase{false, true, 33, 65, 300, 1, 1, 5},
		gemmCase{true, false, 8, 8, 8, 0, 2, 0},
	)
	return cases
}

func (tc gemmCase) operands(r *rand.Rand) (a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.transB {
		br, bc = tc.n, tc.k
	}
	lda, ldb, ldc = max(1, ac+tc.pad), max(1, bc+tc.pad), max(1, tc.n+tc.pad)
	return randSlice(r, ar*lda), lda, randSlice(r, br*ldb), ldb, randSlice(r, tc.m*ldc), ldc
}

func TestGemmMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	w2 := NewWorkers(2)
	defer w2.Close()
	for _, tc := range gemmCases() {
		name := fmt.Sprintf("%t%t_%dx%dx%d_a%g_b%g_pad%d", tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.pad)
		t.Run(name, func(t *testing.T) {
			a, lda, b, ldb, c0, ldc := tc.operands(r)
			want := append([]float32(nil), c0...)
			gemmReference(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
			serial := append([]float32(nil), c0...)
			Gemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, serial, ldc)
			par := append([]float32(nil), c0...)
			w2.Gemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, par, ldc)
			// Error bound of a float32 dot product of length k against float64.
			tol := 1e-6 * float64(tc.k+2)
			for i := 0; i < tc.m; i++ {
				for j := 0; j < ldc; j++ {
					idx := i*ldc + j
					if j >= tc.n {
						if serial[idx] != c0[idx] || par[idx] != c0[idx] {
							t.Fatalf("padding element (%d,%d) written", i, j)
						}
						continue
					}
					scale := 1 + math.Abs(float64(want[idx]))
					if d := math.Abs(float64(serial[idx]-want[idx])) / scale; d > tol {
						t.Fatalf("serial C[%d,%d] = %g, want %g", i, j, serial[idx], want[idx])
					}
					if par[idx] != serial[idx] {
						t.Fatalf("parallel C[%d,%d] = %g differs from serial %g", i, j, par[idx], serial[idx])
					}
				}
			}
		})
	}
}

func TestGemmBetaZeroIgnoresNaN(t *testing.T) {
	c := []float32{float32(math.NaN()), float32(math.Inf(1))}
	Gemm(false, false, 1, 2, 1, 1, []float32{2}, 1, []float32{3, 4}, 2, 0, c, 2)
	if c[0] != 6 || c[1] != 8 {
		t.Fatalf("C = %v, want [6 8]", c)
	}
	Gemm(false, false, 1, 2, 0, 1, nil, 1, nil, 2, 0, c, 2)
	if c[0] != 0 || c[1] != 0 {
		t.Fatalf("k=0, beta=0: C = %v, want zeros", c)
	}
}

func TestGemmPanicsOnShortSlices(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a short A")
		}
	}()
	Gemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
}

func TestGemmItemsCoverC(t *testing.T) {
	for _, s := range [][3]int{{16, 144, 32768}, {64, 576, 2048}, {10, 10, 10}, {2048, 1000, 1}, {512, 512, 512}, {16, 16384, 144}, {7, 9, 20000}} {
		for _, p := range []int{1, 2, 3} {
			for _, arch := range []gemmArch{archGeneric, archAVX2, archAVX512} {
				mr, nr := arch.tile()
				im, in := gemmItems(s[0], s[1], s[2], p, mr, nr)
				if im < 1 || in < 1 {
					t.Fatalf("%v p=%d %v: item %d×%d", s, p, arch, im, in)
				}
				if (im < s[0] && im%mr != 0) || (in < s[1] && in%nr != 0) {
					t.Fatalf("%v p=%d %v: item %d×%d cuts through a %d×%d tile", s, p, arch, im, in, mr, nr)
				}
				items := ((s[0] + im - 1) / im) * ((s[1] + in - 1) / in)
				if p == 1 && items != 1 {
					t.Fatalf("%v one worker: %d items, want 1", s, items)
				}
				if p > 1 && 2*s[0]*s[1]*s[2] >= parallelFlops && (s[0] > 4*mr*p || s[1] > 2*nr*p) && items < p {
					t.Fatalf("%v p=%d %v: %d items leave workers idle", s, p, arch, items)
				}
			}
		}
	}
}

func TestMatMul(t *testing.T) {
	a, _ := FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	b, _ := FromSlice([]float32{7, 8, 9, 10, 11, 12}, 3, 2)
	dst, _ := New(2, 2)
	if err := dst.MatMul(a, b, false, false); err != nil {
		t.Fatal(err)
	}
	want := []float32{58, 64, 139, 154}
	for i, v := range want {
		if dst.Data()[i] != v {
			t.Fatalf("a·b = %v, want %v", dst.Data(), want)
		}
	}
	// aᵀ·aᵀ is 3×2 × ... mismatched: aᵀ is 3×2, so aᵀ·aᵀ needs 2 == 3.
	bad, _ := New(3, 3)
	if err := bad.MatMul(a, a, true, true); err == nil {
		t.Fatal("no error for mismatched inner dimensions")
	}
	// aᵀ·a is 3×3.
	w := NewWorkers(2)
	defer w.Close()
	if err := w.MatMul(bad, a, a, true, false); err != nil {
		t.Fatal(err)
	}
	if got := bad.Data()[0]; got != 1*1+4*4 {
		t.Fatalf("(aᵀa)[0,0] = %g, want 17", got)
	}
	v, _ := New(3)
	if err := dst.MatMul(v, b, false, false); err == nil {
		t.Fatal("no error for a rank-1 operand")
	}
}

func BenchmarkGemm(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct {
		name           string
		transA, transB bool
		m, n, k        int
	}{
		{"conv_fwd_16x16384x144", false, false, 16, 16384, 144},
		{"conv_dw_16x144x16384", false, true, 16, 144, 16384},
		{"conv_dx_144x16384x16", true, false, 144, 16384, 16},
		{"square_128", false, false, 128, 128, 128},
		{"square_512", false, false, 512, 512, 512},
		{"square_1024", false, false, 1024, 1024, 1024},
	} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/w%d", s.name, workers), func(b *testing.B) {
				tc := gemmCase{transA: s.transA, transB: s.transB, m: s.m, n: s.n, k: s.k}
				a, lda, bb, ldb, c, ldc := tc.operands(r)
				w := NewWorkers(workers)
				defer w.Close()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					w.Gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, ldc)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
