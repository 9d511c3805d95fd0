// Command gemm measures float32 GEMM side by side in one run: mspipe's
// tensor.Workers.Gemm, gonum's Sgemm and OpenBLAS's cblas_sgemm (through
// cgo, which is why this is a module of its own), on square row-major
// products at each size and thread count, and prints a markdown table.
//
// The libraries take turns in rounds, so a burst of load from other
// processes hits all of them; each cell reports the best call (the machine's
// capacity) and the median call (what a loaded machine gives).
package main

/*
#cgo CFLAGS: -I/usr/include/x86_64-linux-gnu/openblas-pthread
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/mspipe/mspipe/npu/tensor"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

func main() {
	sizes := flag.String("sizes", "128,512,1024", "comma-separated matrix sizes (m = n = k)")
	threads := flag.String("threads", "1,2", "comma-separated thread counts")
	rounds := flag.Int("rounds", 5, "rounds in which every library takes a turn")
	turn := flag.Duration("turn", 60*time.Millisecond, "time each library runs per round")
	flag.Parse()
	ns, err := parseInts(*sizes)
	if err != nil {
		fail(fmt.Errorf("-sizes: %w", err))
	}
	ts, err := parseInts(*threads)
	if err != nil {
		fail(fmt.Errorf("-threads: %w", err))
	}

	fmt.Printf("OpenBLAS kernel: %s; CPU threads: %d; Go %s %s/%s\n\n",
		C.GoString(C.openblas_get_corename()), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Println("| size | threads | mspipe GFLOP/s best (median) | gonum GFLOP/s best (median) | OpenBLAS GFLOP/s best (median) | mspipe / OpenBLAS (best) | max rel. diff vs OpenBLAS |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range ns {
		for _, t := range ts {
			row, err := measure(n, t, *rounds, *turn)
			if err != nil {
				fail(err)
			}
			fmt.Println(row)
		}
	}
}

// measure runs one size at one thread count and returns its table row.
func measure(n, threads, rounds int, turn time.Duration) (string, error) {
	runtime.GOMAXPROCS(threads)
	C.openblas_set_num_threads(C.int(threads))
	w := tensor.NewWorkers(threads)
	defer w.Close()

	r := rand.New(rand.NewPCG(uint64(n), 7))
	a, b := randSlice(r, n*n), randSlice(r, n*n)
	cm, cg, co := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	libs := []struct {
		name string
		run  func()
	}{
		{"mspipe", func() { w.Gemm(false, false, n, n, n, 1, a, n, b, n, 0, cm, n) }},
		{"gonum", func() {
			gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, n, n, n, 1, a, n, b, n, 0, cg, n)
		}},
		{"openblas", func() {
			C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, C.CblasNoTrans, C.blasint(n), C.blasint(n), C.blasint(n),
				1, (*C.float)(unsafe.Pointer(&a[0])), C.blasint(n), (*C.float)(unsafe.Pointer(&b[0])), C.blasint(n),
				0, (*C.float)(unsafe.Pointer(&co[0])), C.blasint(n))
		}},
	}
	times := make([][]time.Duration, len(libs))
	for i := range libs {
		libs[i].run() // warm-up: page faults, packing buffers, thread start
	}
	for range rounds {
		for i, lib := range libs {
			for start := time.Now(); time.Since(start) < turn; {
				t0 := time.Now()
				lib.run()
				times[i] = append(times[i], time.Since(t0))
			}
		}
	}
	diff := maxRelDiff(cm, co)
	if diff > 1e-3 {
		return "", fmt.Errorf("size %d threads %d: mspipe and OpenBLAS differ by %g", n, threads, diff)
	}
	if d := maxRelDiff(cg, co); d > 1e-3 {
		return "", fmt.Errorf("size %d threads %d: gonum and OpenBLAS differ by %g", n, threads, d)
	}
	flops := 2 * float64(n) * float64(n) * float64(n)
	cells := make([]string, len(libs))
	best := make([]float64, len(libs))
	for i := range libs {
		slices.Sort(times[i])
		best[i] = flops / times[i][0].Seconds() / 1e9
		median := flops / times[i][len(times[i])/2].Seconds() / 1e9
		cells[i] = fmt.Sprintf("%.1f (%.1f)", best[i], median)
	}
	return fmt.Sprintf("| %d | %d | %s | %s | %s | %.0f%% | %.1e |", n, threads,
		cells[0], cells[1], cells[2], 100*best[0]/best[2], diff), nil
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// maxRelDiff is the largest |x-y| / (1+|y|) over the elements.
func maxRelDiff(x, y []float32) float64 {
	var d float64
	for i := range x {
		d = max(d, math.Abs(float64(x[i]-y[i]))/(1+math.Abs(float64(y[i]))))
	}
	return d
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gemm bench:", err)
	os.Exit(2)
}
