package tensor

import (
	"errors"
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
		{2, 5, 5, 40, 9}, // more input than output channels: the input gradient's panels are the longer ones
		{32, 8, 8, 3, 5}, // enough positions for work items of 64, the last one shorter
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
					if cols, count := p.blocks(); n == 32 && (cols < 64 || p.cols%cols == 0 || count*cols < p.cols) {
						t.Fatalf("work items of %d positions, %d of them, for %d positions: want a shorter last item", cols, count, p.cols)
					}
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

// convStride2Reference returns, in float64, the stride-2 convolution y of x
// (NCHW, h and w even) with w [out][in][3][3] and padTop, padLeft zeros
// before the input, its h/2×w/2 output, and for an output gradient dy the
// input and weight gradients.
func convStride2Reference(n, h, wd, in, out, padTop, padLeft int, x, w, dy []float32) (y, dx, dw []float64) {
	oh, ow := h/2, wd/2
	y = make([]float64, n*out*oh*ow)
	dx = make([]float64, n*in*h*wd)
	dw = make([]float64, out*in*9)
	for b := 0; b < n; b++ {
		for o := 0; o < out; o++ {
			for i := 0; i < oh; i++ {
				for j := 0; j < ow; j++ {
					yi := ((b*out+o)*oh+i)*ow + j
					for c := 0; c < in; c++ {
						for kh := 0; kh < 3; kh++ {
							for kw := 0; kw < 3; kw++ {
								ih, iw := 2*i-padTop+kh, 2*j-padLeft+kw
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

// TestConv3x3Stride2MatchesReference runs the stride-2 convolution (its
// input in four phases), input and weight gradients with every kernel
// family, both paddings before the input and pool sizes 1 to 3, against
// float64, and checks the bits do not depend on the pool size.
func TestConv3x3Stride2MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	pools := []*Workers{nil, NewWorkers(2), NewWorkers(3)}
	defer func() {
		for _, w := range pools[1:] {
			w.Close()
		}
	}()
	for _, s := range [][7]int{
		{1, 2, 2, 1, 1, 0, 0}, {2, 6, 8, 3, 5, 0, 0}, {2, 8, 6, 16, 13, 1, 1}, {3, 4, 10, 9, 4, 0, 1}, {2, 16, 16, 32, 64, 0, 0}, {1, 12, 8, 40, 9, 1, 0},
	} {
		n, h, wd, in, out, pt, pl := s[0], s[1], s[2], s[3], s[4], s[5], s[6]
		x, w := randSlice(r, n*in*h*wd), randSlice(r, out*in*9)
		dy, add := randSlice(r, n*out*h*wd/4), randSlice(r, n*in*h*wd)
		wantY, wantDx, wantDw := convStride2Reference(n, h, wd, in, out, pt, pl, x, w, dy)
		for i := range wantDx {
			wantDx[i] += float64(add[i])
		}
		for _, arch := range allGemmArches {
			t.Run(fmt.Sprintf("%v/%dx%dx%dx%d_to%d_pad%d%d", arch, n, in, h, wd, out, pt, pl), func(t *testing.T) {
				if !gemmArchSupported(arch) {
					t.Skipf("%v not supported on this CPU", arch)
				}
				var first [3][]float32
				for pi, pool := range append(pools, nil) {
					p, err := NewConv3x3Stride2(n, h, wd, in, out, pt, pl)
					if err != nil {
						t.Fatal(err)
					}
					if p.OutH != h/2 || p.OutW != wd/2 || p.Stride != 2 {
						t.Fatalf("output %d×%d, stride %d", p.OutH, p.OutW, p.Stride)
					}
					p.setArch(arch)
					p.noDirect = pi == len(pools)
					xs, ys := make([]float32, p.InputLen()), make([]float32, p.Len(out))
					for i := range xs {
						xs[i] = float32(math.NaN()) // PackInput must write the padding too
					}
					p.PackInput(pool, xs, x)
					p.Forward(pool, ys, xs, w)
					y := make([]float32, len(wantY))
					p.Unpack(pool, y, ys, out, nil, nil)
					checkClose(t, "y", y, wantY, 1e-6*float64(in*9))

					dys, dxs := make([]float32, p.Len(out)), make([]float32, p.InputLen())
					p.Pack(pool, dys, dy, out)
					p.BackwardData(pool, dxs, dys, w)
					dx := make([]float32, len(wantDx))
					p.UnpackInput(pool, dx, dxs, add)
					checkClose(t, "dx", dx, wantDx, 1e-6*float64(out*9))

					dw := make([]float32, len(wantDw))
					p.BackwardWeights(pool, dw, dys, xs)
					checkClose(t, "dw", dw, wantDw, 1e-6*float64(n*h*wd))

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

func TestConv3x3Stride2Geometry(t *testing.T) {
	for _, s := range [][4]int{{5, 6, 0, 0}, {6, 7, 0, 0}, {6, 6, 2, 0}, {6, 6, 0, -1}} {
		if _, err := NewConv3x3Stride2(1, s[0], s[1], 2, 2, s[2], s[3]); !errors.Is(err, ErrConvGeometry) {
			t.Errorf("%d×%d with padding %d,%d: error %v, want ErrConvGeometry", s[0], s[1], s[2], s[3], err)
		}
	}
	// Without an addend UnpackInput puts every pixel of a phase-packed
	// input back where it came from.
	p, err := NewConv3x3Stride2(2, 6, 4, 3, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 2*3*6*4)
	for i := range x {
		x[i] = float32(i + 1)
	}
	wide := make([]float32, p.InputLen())
	p.PackInput(nil, wide, x)
	back := make([]float32, len(x))
	p.UnpackInput(nil, back, wide, nil)
	for i := range x {
		if back[i] != x[i] {
			t.Fatalf("element %d came back as %g, want %g", i, back[i], x[i])
		}
	}
}
