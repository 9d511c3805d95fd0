package auto

import (
	"context"
	"fmt"
	"time"

	"github.com/mspipe/mspipe/npu/tensor"
)

// MeasureFLOPS times the training core's GEMM on the calling goroutine for
// at least d and returns its FLOP/s: the FLOPS of a device that has a core
// to itself on this machine (DefaultMachine's figure was measured the
// same way). The product has the shape of a convolution's forward pass,
// 16 output channels × 16384 pixels × 144 taps, where most of a step's
// FLOPs go.
func MeasureFLOPS(ctx context.Context, d time.Duration) (float64, error) {
	const m, n, k = 16, 16384, 144
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	for i := range a {
		a[i] = float32(i%7) / 7
	}
	for i := range b {
		b[i] = float32(i%5) / 5
	}
	tensor.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n) // first touches
	start := time.Now()
	calls := 0
	for calls == 0 || time.Since(start) < d {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("measure FLOP/s: %w", err)
		}
		tensor.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		calls++
	}
	return 2 * m * n * k * float64(calls) / time.Since(start).Seconds(), nil
}

// MeasureMemoryBandwidth times the optimizer's loop (npu/optim's Momentum
// update, the step's largest loop besides the products) on the calling
// goroutine over buffers well beyond the caches, for at least d, and
// returns the bytes/s it moves, counting [UpdateBytesPerElement] per
// element: a device's MemoryBandwidth with a core to itself.
func MeasureMemoryBandwidth(ctx context.Context, d time.Duration) (float64, error) {
	const n = 8 << 20 // 3 buffers of 32 MiB: past a 32 MiB L3
	w, g, m := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range g {
		g[i] = float32(i%9) / 9
	}
	const lr, mom = 0.01, 0.9
	update := func() {
		for j := range m {
			m[j] = m[j]*mom + g[j]
			w[j] -= lr * m[j]
		}
	}
	update() // the first touches of the pages are not the loop's rate
	start := time.Now()
	passes := 0
	for passes == 0 || time.Since(start) < d {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("measure memory bandwidth: %w", err)
		}
		update()
		passes++
	}
	return float64(passes) * n * UpdateBytesPerElement / time.Since(start).Seconds(), nil
}

// MeasureTransposedBandwidth times the product kernel on the calling
// goroutine for at least d on the input gradient of a wide MatMul with a
// small batch, dy·wᵀ of 4×3072 by a weight w of 3072×4096 (48 MiB) read
// transposed, and returns the weight's bytes over the time: a device's
// TransposedBandwidth with a core to itself.
func MeasureTransposedBandwidth(ctx context.Context, d time.Duration) (float64, error) {
	const n, k, m = 4, 3072, 4096
	dy, w, dx := make([]float32, n*m), make([]float32, k*m), make([]float32, n*k)
	for i := range w {
		w[i] = float32(i%7) / 7
	}
	tensor.Gemm(false, true, n, k, m, 1, dy, m, w, m, 0, dx, k) // first touches
	start := time.Now()
	calls := 0
	for calls == 0 || time.Since(start) < d {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("measure transposed bandwidth: %w", err)
		}
		tensor.Gemm(false, true, n, k, m, 1, dy, m, w, m, 0, dx, k)
		calls++
	}
	return float64(calls) * k * m * BytesPerElement / time.Since(start).Seconds(), nil
}

// MeasureWeightGradBandwidth times the product kernel on the calling
// goroutine for at least d on the weight gradient of a wide MatMul with a
// small batch, xᵀ·dy of 3072×4 by 4×4096 (a 48 MiB result), and returns
// the result's bytes over the time: a device's WeightGradBandwidth with a
// core to itself.
func MeasureWeightGradBandwidth(ctx context.Context, d time.Duration) (float64, error) {
	const n, k, m = 4, 3072, 4096
	x, dy, dw := make([]float32, n*k), make([]float32, n*m), make([]float32, k*m)
	for i := range x {
		x[i] = float32(i%7) / 7
	}
	tensor.Gemm(true, false, k, m, n, 1, x, k, dy, m, 0, dw, m) // first touches
	start := time.Now()
	calls := 0
	for calls == 0 || time.Since(start) < d {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("measure weight-gradient bandwidth: %w", err)
		}
		tensor.Gemm(true, false, k, m, n, 1, x, k, dy, m, 0, dw, m)
		calls++
	}
	return float64(calls) * k * m * BytesPerElement / time.Since(start).Seconds(), nil
}
