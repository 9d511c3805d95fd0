package auto

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/parallel"
)

// Networks written as the engine's shard.GraphOf would describe them, to
// price and search without it.

func matmul(name string, n, k, m int) parallel.OpSpec {
	return parallel.OpSpec{
		Name: name, Kind: parallel.OpMatMul, Splittable: "nkm",
		Inputs: []parallel.TensorSpec{{Shape: []int{n, k}, Labels: "nk"}, {Name: name + ".weight", Shape: []int{k, m}, Labels: "km"}},
		Output: parallel.TensorSpec{Shape: []int{n, m}, Labels: "nm"},
		FLOPs:  2 * int64(n) * int64(k) * int64(m),
	}
}

func biasAdd(name string, n, m int) parallel.OpSpec {
	return parallel.OpSpec{
		Name: name, Kind: parallel.OpBiasAdd, Splittable: "nm",
		Inputs: []parallel.TensorSpec{{Shape: []int{n, m}, Labels: "nm"}, {Name: name + ".bias", Shape: []int{m}, Labels: "m"}},
		Output: parallel.TensorSpec{Shape: []int{n, m}, Labels: "nm"},
		FLOPs:  int64(n) * int64(m),
	}
}

func elementwise(name string, kind parallel.OpKind, shape []int, labels string) parallel.OpSpec {
	return parallel.OpSpec{
		Name: name, Kind: kind, Splittable: labels,
		Inputs: []parallel.TensorSpec{{Shape: shape, Labels: labels}},
		Output: parallel.TensorSpec{Shape: shape, Labels: labels},
		FLOPs:  elements(shape),
	}
}

func reduceSum(name string, n, m int) parallel.OpSpec {
	return parallel.OpSpec{
		Name: name, Kind: parallel.OpReduceSum, Splittable: "nm",
		Inputs: []parallel.TensorSpec{{Shape: []int{n, m}, Labels: "nm"}},
		Output: parallel.TensorSpec{Shape: []int{n}, Labels: "n"},
		FLOPs:  int64(n) * int64(m),
	}
}

// loss is SoftmaxCrossEntropyExpand over logits [n,c] and labels [n]:
// a scalar, partial over the batch when the batch is split.
func loss(n, c int) parallel.OpSpec {
	return parallel.OpSpec{
		Name: "loss", Kind: parallel.OpLoss, Splittable: "n",
		Inputs: []parallel.TensorSpec{{Shape: []int{n, c}, Labels: "nc"}, {Shape: []int{n}, Labels: "n"}},
		Output: parallel.TensorSpec{Shape: []int{}, Labels: ""},
		FLOPs:  6 * int64(n) * int64(c),
	}
}

// seedsNet is the seeds' SemiAutoParallelNet: MatMul of x[n,512] with a
// [512,128] weight, then ReduceSum over the last dimension.
func seedsNet(n int) parallel.Graph {
	fc := matmul("fc.matmul", n, 512, 128)
	fc.Inputs[1].Name = "fc.weight"
	return parallel.Graph{Model: "semi_auto_parallel_net", Ops: []parallel.OpSpec{fc, reduceSum("reduce", n, 128)}}
}

// wideMLP is a Dense network on flattened CIFAR images with hidden layers
// width wide.
func wideMLP(n, width int) parallel.Graph {
	return parallel.Graph{Model: fmt.Sprintf("mlp%d", width), Ops: []parallel.OpSpec{
		matmul("fc1", n, 3072, width),
		biasAdd("fc1.bias_add", n, width),
		elementwise("relu1", parallel.OpReLU, []int{n, width}, "nm"),
		matmul("fc2", n, width, width),
		elementwise("relu2", parallel.OpReLU, []int{n, width}, "nm"),
		matmul("fc3", n, width, 10),
		loss(n, 10),
	}}
}

func conv(name string, n, c, o, hw int) parallel.OpSpec {
	return parallel.OpSpec{
		Name: name, Kind: parallel.OpConv2D, Splittable: "no",
		Inputs: []parallel.TensorSpec{{Shape: []int{n, c, hw, hw}, Labels: "nchw"}, {Name: name + ".weight", Shape: []int{o, c, 3, 3}, Labels: "ocij"}},
		Output: parallel.TensorSpec{Shape: []int{n, o, hw, hw}, Labels: "nohw"},
		FLOPs:  2 * int64(n) * int64(o) * int64(hw*hw) * int64(c) * 9,
	}
}

// cnn is a small ResNet-like network: a convolution, BatchNorm, ReLU, max
// pooling, a residual Block (two 3×3 convolutions, batch split only),
// global average pooling and a Dense classifier.
func cnn(n int) parallel.Graph {
	bn := elementwise("bn1", parallel.OpBatchNorm, []int{n, 16, 32, 32}, "nchw")
	bn.Splittable = "nc"
	bn.Extra = []parallel.TensorSpec{{Name: "bn1.gamma", Shape: []int{16}, Labels: "c"}, {Name: "bn1.beta", Shape: []int{16}, Labels: "c"}}
	pool := parallel.OpSpec{Name: "pool", Kind: parallel.OpMaxPool, Splittable: "nc",
		Inputs: []parallel.TensorSpec{{Shape: []int{n, 16, 32, 32}, Labels: "nchw"}},
		Output: parallel.TensorSpec{Shape: []int{n, 16, 16, 16}, Labels: "ncHW"},
		FLOPs:  int64(n) * 16 * 32 * 32}
	block := elementwise("layer1.0", parallel.OpBlock, []int{n, 16, 16, 16}, "nchw")
	block.Splittable = "n"
	block.FLOPs = 2 * (2 * int64(n) * 16 * 16 * 16 * 16 * 9)
	block.Extra = []parallel.TensorSpec{{Name: "layer1.0.conv1.weight", Shape: []int{16, 16, 3, 3}, Labels: "ocij"}, {Name: "layer1.0.conv2.weight", Shape: []int{16, 16, 3, 3}, Labels: "ocij"}}
	avg := parallel.OpSpec{Name: "avgpool", Kind: parallel.OpAvgPool, Splittable: "nc",
		Inputs: []parallel.TensorSpec{{Shape: []int{n, 16, 16, 16}, Labels: "nchw"}},
		Output: parallel.TensorSpec{Shape: []int{n, 16}, Labels: "nc"},
		FLOPs:  int64(n) * 16 * 16 * 16}
	return parallel.Graph{Model: "cnn", Ops: []parallel.OpSpec{
		conv("conv1", n, 3, 16, 32), bn,
		elementwise("relu", parallel.OpReLU, []int{n, 16, 32, 32}, "nchw"),
		pool, block, avg, matmul("fc", n, 16, 10), loss(n, 10),
	}}
}
