// Package tensor provides float32 tensors and the numeric kernels of the
// simulated NPU: a shape-checked tensor API, GEMM with transposed operands,
// a worker pool that spreads kernels over the CPU cores, and im2col/col2im for
// 2-D convolution.
//
// # Overview
//
// A Tensor is a shape plus a contiguous []float32 in row-major order. Images
// use NCHW: element (n, c, h, w) of an N×C×H×W tensor is at
// ((n*C+c)*H+h)*W+w. Matrices are rank-2 tensors, element (i, j) of an m×n
// matrix at i*n+j.
//
// The destination is the receiver: dst.MatMul(a, b, false, true) writes a·bᵀ
// into dst, so a training loop allocates its tensors once and reuses them.
// Every method that takes tensors checks their shapes and returns an error
// wrapping ErrShape on a mismatch; shapes that come from users never panic.
//
// # Kernels
//
// Gemm, Workers.Gemm, Workers.GemmNT, Conv3x3, Im2col, Col2im and the
// element-wise kernels (SumSquares, Affine, GradSums, LinearComb, ReLUGrad,
// AddTo, SumBroadcast) work on plain []float32 with lengths
// and strides. They never allocate, log or return errors: their callers (the
// layers in npu/nn) derive every length from shapes they have already checked,
// so a wrong length is a broken invariant and panics.
//
// GEMM packs blocks of A and B into contiguous panels and runs a
// register-blocked micro-kernel over them: AVX-512 (12×32 tiles of C) or
// AVX2+FMA (6×16) in assembly on amd64, picked at run time from the CPU's
// features, and a portable Go kernel (2×4) on other CPUs and architectures
// and with the purego build tag. K is cut into blocks by a rule that depends
// only on k, and each element of C is one chain of multiply-adds in order of
// k per block, so a result is bit-identical
// whether one core or several computed it and wherever a tile of C ends.
// Different kernel families may differ in the last bits. Workers keep their
// packing buffers; the package-level Gemm packs into smaller blocks on the
// goroutine's stack, so neither allocates once warm.
//
// Workers.GemmNT computes A·Bᵀ when both run along a long K, as a weight
// gradient does, with dot-product kernels that read the rows in place
// (AVX-512 4×6 and AVX2 3×4 tiles of vector partial sums, a Go fallback).
//
// Conv3x3 runs 3×3 convolutions without im2col, stride 1 with one pixel of
// padding, or stride 2 over even sizes: the batch sits channel-major with a
// zero column per row and a zero row per image, so each kernel tap is the
// input shifted by a constant (with stride 2, one of the input's four
// phases, its even and odd rows and columns, shifted by a constant). The
// forward pass and the input gradient run the GEMM micro-kernels over the
// taps (an AVX-512 kernel reads them in place, other families pack a tile
// of taps into an L1 panel first, with the same bits), and the weight
// gradient is a GemmNT of the padded output gradient with the shifted
// inputs.
//
// The element-wise kernels of BatchNorm, ReLU and residual sums have AVX2
// loops in assembly; sums are taken in float64.
//
// SumBroadcast, the reduction of AllReduce over shared memory, sums k
// slices in a fixed order and stores the result into several destinations
// in one pass: an AVX2 kernel (plain stores when it writes back into its
// sources, non-temporal ones to other memory), the same bits from the Go
// loop elsewhere.
//
// Every assembly file (*_amd64.s) is written by the generator in
// internal/asmgen (go generate); a test fails when a file drifts from it.
// Each kernel has a Go fallback, used on other CPUs and architectures and
// with the purego build tag, and tests run both on the same inputs.
//
// Workers splits every parallel operation with affinity: worker i first
// runs the i-th contiguous share of the work (the images of a batch, the
// positions of a product), then steals from the far end of the others'.
// Consecutive layers thus keep each core on the images it already holds in
// its caches, which matters on machines whose cores share no cache, while
// a core slowed by other load is helped out. Idle helpers poll for the next
// operation for a few milliseconds before they sleep: waking a sleeping
// thread costs as much as a small operation.
//
// # Invariants
//
//   - Data() of a tensor has exactly Len() elements, the product of Shape().
//   - Kernels never read or write outside the index ranges their arguments
//     describe, and never retain a slice after returning.
//   - Workers run one parallel operation at a time; the goroutine that owns a
//     Workers value is the only one that calls it.
package tensor

//go:generate go run ./internal/asmgen
