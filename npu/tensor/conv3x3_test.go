package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// conv3x3Reference returns, in float64, the stride-1 pad-1 convolution y of x
// (NCHW) with w [out][in][3][3], and for an output gradient dy the input and
// weight gradients.
func conv3x3Reference(n, h, wd, in, out int, x, w, dy []float32) (y, dx, dw []float64) {
	y = make([]float64, n*out*h*wd)
	dx = make([]float64, n*in*h*wd)
	dw = make([]float64, out*in*9)
	for b := 0; b < n; b++ {
		for o := 0; o < out; o++ {
			for oh := 0; oh < h; oh++ {
				for ow := 0; ow < wd; ow++ {
					yi := ((b*out+o)*h+oh)*wd + ow
					for c := 0; c < in; c++ {
						for kh := 0; kh < 3; kh++ {
							for kw := 0; kw < 3; kw++ {
								ih, iw := oh+kh-1, ow+kw-1
								if ih < 0 || ih >= h || iw < 0 || iw >= wd {
									continue
								}
								xi := ((b*in+c)*h+ih)*wd + iw
								wi := (o*in+c)*9 + kh*3 + kw
								y[yi] += float64(w[wi]) * float64(x[xi])
								dx[xi] += float64(w[wi]) * float64(dy[yi])
								dw[wi] += float64(x[xi]) * float64(dy[yi])
							}
						}
					}
				}
			}
		}
	}
	return y, dx, dw
}

func checkClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	scale := 1.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(v))
	}
	for i, v := range want {
		if d := math.Abs(float64(got[i]) - v); d > tol*scale || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], v)
		}
	}
}

// TestConv3x3MatchesReference runs the shift-layout convolution, its input
// and weight gradients with every kernel family this CPU has, over shapes
// with partial row panels and tiles, and checks the bits do not depend on
// the pool size.
func TestConv3x3MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pools := []*Workers{nil, NewWorkers(2), NewWorkers(3)}
	defer func() {
		for _, w := range pools[1:] {
			w.Close()
		}
	}()
	for _, s := range [][5]int{
		{1, 1, 1, 1, 1}, {2, 5, 6, 3, 4}, {3, 8, 8, 16, 16}, {2, 7, 3, 5, 13}, {4, 4, 9, 8, 37}, {2, 16, 16, 32, 32}, {1, 3, 40, 12, 64},
	} {
		n, h, wd, in, out := s[0], s[1], s[2], s[3], s[4]
		x, w, dy := randSlice(r, n*in*h*wd), randSlice(r, out*in*9), randSlice(r, n*out*h*wd)
		wantY, wantDx, wantDw := conv3x3Reference(n, h, wd, in, out, x, w, dy)
		tol := 1e-5 * float64(in*9+n*h*wd)
		for _, arch := range allGemmArches {
			t.Run(fmt.Sprintf("%v/%dx%dx%dx%d_to%d", arch, n, in, h, wd, out), func(t *testing.T) {
				if !gemmArchSupported(arch) {
					t.Skipf("%v not supported on this CPU", arch)
				}
				var first [3][]float32
				// The last run packs every tap (the AVX-512 family reads
				// them in place otherwise): the bits must not change.
				for pi, pool := range append(pools, nil) {
					p, err := NewConv3x3(n, h, wd, in, out)
					if err != nil {
						t.Fatal(err)
					}
					p.setArch(arch)
					p.noDirect = pi == len(pools)
					xs, ys := make([]float32, p.Len(in)), make([]float32, p.Len(out))
					for i := range xs {
						xs[i] = float32(math.NaN()) // Pack must write the padding too
					}
					p.Pack(pool, xs, x, in)
					p.Forward(pool, ys, xs, w)
					y := make([]float32, len(wantY))
					p.Unpack(pool, y, ys, out, nil, nil)
					checkClose(t, "y", y, wantY, 1e-6*float64(in*9))

					dys, dxs := make([]float32, p.Len(out)), make([]float32, p.Len(in))
					p.Pack(pool, dys, dy, out)
					p.BackwardData(pool, dxs, dys, w)
					dx := make([]float32, len(wantDx))
					p.Unpack(pool, dx, dxs, in, nil, nil)
					checkClose(t, "dx", dx, wantDx, 1e-6*float64(out*9))

					dw := make([]float32, len(wantDw))
					p.BackwardWeights(pool, dw, dys, xs)
					checkClose(t, "dw", dw, wantDw, tol*1e-1)

					got := [3][]float32{y, dx, dw}
					if pi == 0 {
						first = got
						continue
					}
					for k := range got {
						for i := range got[k] {
							if math.Float32bits(got[k][i]) != math.Float32bits(first[k][i]) {
								t.Fatalf("run %d (pool of %d): result %d element %d differs from the serial run", pi, pool.N(), k, i)
							}
						}
					}
				}
			})
		}
	}
}

func TestConv3x3UnpackBiasAndAddend(t *testing.T) {
	// Rows of 2 take the Go loops, rows of 8 the vector copies (with AVX2).
	for _, w := range []int{2, 8} {
		p, err := NewConv3x3(2, 3, w, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, 2*2*3*w)
		for i := range x {
			x[i] = float32(i)
		}
		wide := make([]float32, p.Len(2))
		p.Pack(nil, wide, x, 2)
		add := make([]float32, len(x))
		for i := range add {
			add[i] = 100 + float32(i%5)
		}
		for _, bias := range [][]float32{nil, {0.5, -1}} {
			got := make([]float32, len(x))
			p.Unpack(nil, got, wide, 2, bias, add)
			for i, v := range got {
				want := x[i] + add[i]
				if bias != nil {
					want += bias[i/(3*w)%2]
				}
				if v != want {
					t.Fatalf("w %d, bias %v: element %d = %g, want %g", w, bias, i, v, want)
				}
			}
		}
	}
	if _, err := NewConv3x3(0, 3, 3, 1, 1); err == nil {
		t.Fatal("empty batch accepted")
	}
	if _, err := NewConv3x3(1, 3, 3, MaxConv3x3Channels+1, 1); err == nil {
		t.Fatal("too many channels accepted")
	}
}

// TestGemmNTMatchesReference checks A·Bᵀ by the dot kernels against float64
// for every family, including the tail past the last whole vector, edge
// tiles and several K blocks, and bit-identity across pool sizes.
func TestGemmNTMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	pools := []*Workers{nil, NewWorkers(2), NewWorkers(3)}
	defer func() {
		for _, w := range pools[1:] {
			w.Close()
		}
	}()
	for _, s := range [][3]int{{1, 1, 1}, {1, 1, 17}, {3, 5, 40}, {4, 4, 16}, {16, 144, 1000}, {7, 9, 70000}, {70, 3, 300}} {
		m, n, k := s[0], s[1], s[2]
		lda, ldb, ldc := k+3, k+1, n+2
		a, b := randSlice(r, (m-1)*lda+k), randSlice(r, (n-1)*ldb+k)
		want := make([]float64, m*n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				for q := 0; q < k; q++ {
					want[i*n+j] += float64(a[i*lda+q]) * float64(b[j*ldb+q])
				}
			}
		}
		for _, arch := range allGemmArches {
			t.Run(fmt.Sprintf("%v/%dx%dx%d", arch, m, n, k), func(t *testing.T) {
				if !gemmArchSupported(arch) {
					t.Skipf("%v not supported on this CPU", arch)
				}
				var first []float32
				for _, pool := range pools {
					c := make([]float32, (m-1)*ldc+n+1)
					c[len(c)-1] = 42
					off := make([]int, m+n)
					for i := 0; i < m; i++ {
						off[i] = i * lda
					}
					for j := 0; j < n; j++ {
						off[m+j] = j * ldb
					}
					var job dotJob
					job.set(arch, a, off[:m], b, off[m:], k, c, ldc, m+n)
					if k > 1000 {
						job.block = 256 // several K blocks
					}
					job.run(pool)
					if c[len(c)-1] != 42 {
						t.Fatal("wrote past C")
					}
					got := make([]float32, m*n)
					for i := 0; i < m; i++ {
						copy(got[i*n:(i+1)*n], c[i*ldc:i*ldc+n])
					}
					checkClose(t, "c", got, want, 1e-6*math.Sqrt(float64(k)))
					if first == nil {
						first = got
						continue
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
							t.Fatalf("pool of %d: element %d differs", pool.N(), i)
						}
					}
				}
			})
		}
	}
	// The exported entry point picks the best family.
	a, b := randSlice(r, 3*50), randSlice(r, 2*50)
	c := make([]float32, 6)
	NewWorkers(1).GemmNT(3, 2, 50, a, 50, b, 50, c, 2, nil)
	for i := 0; i < 3; i++ {
		for j := 0; j < 2; j++ {
			var s float64
			for q := 0; q < 50; q++ {
				s += float64(a[i*50+q]) * float64(b[j*50+q])
			}
			if math.Abs(s-float64(c[i*2+j])) > 1e-4 {
				t.Fatalf("GemmNT c[%d,%d] = %g, want %g", i, j, c[i*2+j], s)
			}
		}
	}
}

// BenchmarkConv3x3 times the three products of a ResNet-20 layer1
// convolution (batch 32, 16→16 channels, 32×32) on one goroutine; the
// metric is GFLOP/s of the product itself.
func BenchmarkConv3x3(b *testing.B) {
	for _, s := range [][3]int{{32, 16, 16}, {16, 32, 32}, {8, 64, 64}} {
		const n = 32
		hw, in, out := s[0], s[1], s[2]
		r := rand.New(rand.NewPCG(1, 2))
		p, err := NewConv3x3(n, hw, hw, in, out)
		if err != nil {
			b.Fatal(err)
		}
		x, w, dy := randSlice(r, p.Len(in)), randSlice(r, out*in*9), randSlice(r, p.Len(out))
		img := randSlice(r, n*in*hw*hw)
		p.Pack(nil, x, img, in)
		y, dw := make([]float32, p.Len(out)), make([]float32, out*in*9)
		flops := 2 * float64(n*hw*hw*in*out*9)
		for _, op := range []struct {
			name string
			run  func()
		}{
			{"forward", func() { p.Forward(nil, y, x, w) }},
			{"data", func() { p.BackwardData(nil, x, y, w) }},
			{"weights", func() { p.BackwardWeights(nil, dw, dy, x) }},
		} {
			b.Run(fmt.Sprintf("%dx%d_%dto%d/%s", hw, hw, in, out, op.name), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					op.run()
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
