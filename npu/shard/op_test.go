package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

func randomTensor(t *testing.T, rng *rand.Rand, shape []int) *tensor.Tensor {
	t.Helper()
	x, err := tensor.New(shape...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range x.Data() {
		x.Data()[i] = rng.Float32()*2 - 1
	}
	return x
}

// boxOf copies rank's box of a whole tensor laid out as l.
func boxOf(t *testing.T, whole []float32, l parallel.Layout, rank int) []float32 {
	t.Helper()
	b, err := l.Box(rank)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, volume(b.Shape))
	parallel.CopyBox(out, b.Shape, nil, whole, l.Shape, b.Offset, b.Shape)
	return out
}

// groupSum adds the per-rank values of rank's group over axes, in group
// order, as GroupAllReduce does (rank's own values when axes is empty).
func groupSum(t *testing.T, l parallel.Layout, axes []int, rank int, vals [][]float32) []float32 {
	t.Helper()
	if len(axes) == 0 {
		return vals[rank]
	}
	g, err := l.Group(rank, axes)
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(vals[g[0]])
	for _, q := range g[1:] {
		for i, v := range vals[q] {
			out[i] += v
		}
	}
	return out
}

// checkOp runs op whole and split by strategy over devices ranks (each
// rank's layer built as New builds it), and checks that every rank's
// output, input gradient and parameter gradients, once their partial sums
// are reduced, equal the whole operator's boxes.
func checkOp(t *testing.T, o opDef, strategy [][]int, devices int) {
	t.Helper()
	ol, err := o.spec.Shard(strategy, devices)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, uint64(devices)))
	build := func(rank int, layouts *parallel.OpLayout) nn.Layer {
		n := &Net{cfg: Config{Rank: rank, Seed: 4}, dev: nn.NewDevice(1)}
		t.Cleanup(n.dev.Close)
		layer, err := n.buildLayer(o, layouts)
		if err != nil {
			t.Fatal(err)
		}
		return layer
	}
	whole, err := o.spec.Shard(make1s(strategy), 1)
	if err != nil {
		t.Fatal(err)
	}
	ref := build(0, whole)
	x := randomTensor(t, rng, o.spec.Inputs[0].Shape)
	y, err := ref.Forward(x, true)
	if err != nil {
		t.Fatal(err)
	}
	dy := randomTensor(t, rng, o.spec.Output.Shape)
	dx, err := ref.Backward(dy)
	if err != nil {
		t.Fatal(err)
	}
	_, pls, partial := paramSpecs(o.spec, ol)
	ys, dxs := make([][]float32, devices), make([][]float32, devices)
	grads := make([][][]float32, len(pls))
	for k := range grads {
		grads[k] = make([][]float32, devices)
	}
	for r := range devices {
		layer := build(r, ol)
		in, _ := ol.Inputs[0].Box(r)
		xr, err := tensor.FromSlice(boxOf(t, x.Data(), ol.Inputs[0], r), in.Shape...)
		if err != nil {
			t.Fatal(err)
		}
		yr, err := layer.Forward(xr, true)
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		ys[r] = slices.Clone(yr.Data())
		out, _ := ol.Output.Box(r)
		dyr, err := tensor.FromSlice(boxOf(t, dy.Data(), ol.Output, r), out.Shape...)
		if err != nil {
			t.Fatal(err)
		}
		dxr, err := layer.Backward(dyr)
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		dxs[r] = slices.Clone(dxr.Data())
		for k, p := range layer.Params() {
			if p.Trainable {
				grads[k][r] = slices.Clone(p.Grad.Data())
			}
		}
	}
	wholeParams := ref.Params()
	for r := range devices {
		if rel := relDiff(groupSum(t, ol.Output, ol.OutputPartial, r, ys), boxOf(t, y.Data(), ol.Output, r)); rel > 1e-6 {
			t.Errorf("rank %d output: relative difference %.3g", r, rel)
		}
		if rel := relDiff(groupSum(t, ol.Inputs[0], ol.GradPartial[0], r, dxs), boxOf(t, dx.Data(), ol.Inputs[0], r)); rel > 1e-6 {
			t.Errorf("rank %d input gradient: relative difference %.3g", r, rel)
		}
		for k, p := range wholeParams {
			if !p.Trainable {
				continue
			}
			if rel := relDiff(groupSum(t, pls[k], partial[k], r, grads[k]), boxOf(t, p.Grad.Data(), pls[k], r)); rel > 1e-6 {
				t.Errorf("rank %d gradient of %s: relative difference %.3g", r, p.Name, rel)
			}
		}
	}
}

func make1s(s [][]int) [][]int {
	out := make([][]int, len(s))
	for i := range s {
		out[i] = make([]int, len(s[i]))
		for k := range out[i] {
			out[i][k] = 1
		}
	}
	return out
}

// TestShardedOpsEqualWhole checks every operator kind's sharded forward
// and backward against the unsharded one, with splits of the batch, of
// channels and of a contraction (partial sums).
func TestShardedOpsEqualWhole(t *testing.T) {
	img := []int{4, 4, 6, 6}
	conv, _, err := convOp("conv", img, nn.Conv2dConfig{In: 4, Out: 8, Kernel: 3, Stride: 1, HasBias: true})
	if err != nil {
		t.Fatal(err)
	}
	pool, _, err := maxPoolOp("pool", img, 2, 2, tensor.Padding{Mode: tensor.PadValid})
	if err != nil {
		t.Fatal(err)
	}
	avg, _ := avgPoolOp("mean", img)
	flat, _ := flattenOp("flatten", img)
	for _, tc := range []struct {
		op       opDef
		strategy [][]int
	}{
		{matMulOp("fc.matmul", "fc.weight", 8, 12, 16), [][]int{{1, 1}, {1, 4}}},
		{matMulOp("fc.matmul", "fc.weight", 8, 12, 16), [][]int{{2, 2}, {2, 1}}},
		{matMulOp("fc.matmul", "fc.weight", 8, 12, 16), [][]int{{1, 2}, {2, 2}}},
		{denseOp("end_point.matmul", "end_point", 8, 12, 10), [][]int{{1, 4}, {1, 4}}},
		{denseOp("end_point.matmul", "end_point", 8, 12, 10), [][]int{{2, 2}, {1, 2}}},
		{biasAddOp("end_point.bias_add", "end_point.bias", 8, 12), [][]int{{2, 2}, {2}}},
		{reluOp("relu", []int{8, 12}), [][]int{{2, 2}}},
		{reluOp("relu", img), [][]int{{2, 2, 1, 1}}},
		{reduceSumOp("sum", 8, 12), [][]int{{1, 4}}},
		{reduceSumOp("sum", 8, 12), [][]int{{2, 2}}},
		{conv, [][]int{{2, 1, 1, 1}, {2, 1, 1, 1}}},
		{conv, [][]int{{1, 1, 1, 1}, {4, 1, 1, 1}}},
		{bnOp("bn", img, 1e-5, 0.9), [][]int{{1, 4, 1, 1}}},
		{pool, [][]int{{2, 2, 1, 1}}},
		{avg, [][]int{{2, 2, 1, 1}}},
		{flat, [][]int{{2, 2, 1, 1}}},
	} {
		t.Run(fmt.Sprintf("%s %v", tc.op.spec.Name, tc.strategy), func(t *testing.T) {
			checkOp(t, tc.op, tc.strategy, 4)
		})
	}
}
