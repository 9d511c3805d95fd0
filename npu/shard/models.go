package shard

import (
	"fmt"
	"strings"

	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// CIFAR images: the input of every model.
const (
	imageChannels = 3
	imageSide     = 32
	// DefaultClasses is the class count when Config.Classes is 0 and the
	// one GraphOf uses: CIFAR-10's.
	DefaultClasses = 10
)

// Models returns the names of the models GraphOf and New know, sorted.
func Models() []string {
	return []string{"cnn", "hybrid_net", "resnet20", "resnet50", "semi_auto_net", "wide_net"}
}

// shapes are what an operator's layer is built from: the whole shapes (on
// a throwaway device, for the initial values) or one rank's slice shapes.
type shapes struct {
	in, out []int
	params  map[string][]int
	whole   bool
	// pad, when set, replaces a windowed operator's padding: a rank
	// computing from a halo box pads only the image's own edges.
	pad *tensor.Padding
}

// opDef is one operator of a model: its spec for sharding and how to
// build its layer (nil for the loss and AllReduce, which the engine runs).
type opDef struct {
	spec  parallel.OpSpec
	build func(s shapes, seed uint64, dev *nn.Device) (nn.Layer, error)
	// window is the geometry over the whole input of an operator that
	// reads a window of rows and columns (a convolution, a pooling): its
	// H and W splits exchange a halo.
	window *tensor.ConvGeom
}

// modelDef is a named model for one global batch size.
type modelDef struct {
	name string
	ops  []opDef
	// declared returns the strategy a hybrid_parallel model sets itself
	// for a job of the given size (nil: the model declares none).
	declared func(devices int) parallel.Strategy
	// layerwise names the layerwise_parallel parameters.
	layerwise map[string]bool
}

func (m *modelDef) graph() parallel.Graph {
	g := parallel.Graph{Model: m.name, Ops: make([]parallel.OpSpec, len(m.ops))}
	for i, o := range m.ops {
		g.Ops[i] = o.spec
	}
	return g
}

// GraphOf returns the operator graph of the named model for a global batch
// of globalBatch CIFAR images (10 classes). Parameter names are those of
// the stand_alone models, so checkpoints move between modes. Nothing is
// allocated.
func GraphOf(model string, globalBatch int) (parallel.Graph, error) {
	def, err := define(model, globalBatch, DefaultClasses)
	if err != nil {
		return parallel.Graph{}, err
	}
	return def.graph(), nil
}

func define(model string, batch, classes int) (*modelDef, error) {
	if batch < 1 {
		return nil, fmt.Errorf("%w: model %s: global batch %d, want at least 1", ErrConfig, model, batch)
	}
	if classes < 1 {
		return nil, fmt.Errorf("%w: model %s: %d classes, want at least 1", ErrConfig, model, classes)
	}
	x := []int{batch, imageChannels, imageSide, imageSide}
	switch model {
	case "semi_auto_net":
		return linearNet(model, x, 128, false, classes), nil
	case "wide_net":
		return linearNet(model, x, 4096, true, classes), nil
	case "hybrid_net":
		return hybridNet(x, classes), nil
	case "cnn":
		return cnn(x, classes)
	case "resnet20":
		return resnet(model, x, classes)
	case "resnet50":
		return resnet(model, x, classes)
	}
	return nil, fmt.Errorf("%w: unknown model %q (%s)", ErrConfig, model, strings.Join(Models(), ", "))
}

// linearNet is the seeds' SemiAutoParallelNet made a CIFAR classifier:
// flatten, fc.matmul x·fc.weight with fc.weight [3072 hidden] (MatMul,
// [in, out] as in the seeds), optionally fc.bias_add, relu, end_point
// (Dense: end_point.matmul with end_point.weight [classes hidden], then
// end_point.bias_add), and the loss.
func linearNet(name string, x []int, hidden int, fcBias bool, classes int) *modelDef {
	n := x[0]
	flat, in := flattenOp("flatten", x)
	ops := []opDef{flat, matMulOp("fc.matmul", "fc.weight", n, in[1], hidden)}
	if fcBias {
		ops = append(ops, biasAddOp("fc.bias_add", "fc.bias", n, hidden))
	}
	ops = append(ops, reluOp("relu", []int{n, hidden}),
		denseOp("end_point.matmul", "end_point", n, hidden, classes),
		biasAddOp("end_point.bias_add", "end_point.bias", n, classes),
		lossOp(n, classes))
	return &modelDef{name: name, ops: ops}
}

// hybridNet is semi_auto_net split the way the seeds' HybridParallelNet
// splits itself: fc.weight is layerwise_parallel, sliced on its second
// dimension over all devices, so the hidden activations are sliced too;
// end_point.weight is sliced on its input dimension, so end_point.matmul
// gives partial sums an explicit AllReduce adds up.
func hybridNet(x []int, classes int) *modelDef {
	n := x[0]
	const hidden = 128
	flat, in := flattenOp("flatten", x)
	def := &modelDef{
		name: "hybrid_net",
		ops: []opDef{
			flat,
			matMulOp("fc.matmul", "fc.weight", n, in[1], hidden),
			reluOp("relu", []int{n, hidden}),
			denseOp("end_point.matmul", "end_point", n, hidden, classes),
			allReduceOp("allreduce", []int{n, classes}),
			biasAddOp("end_point.bias_add", "end_point.bias", n, classes),
			lossOp(n, classes),
		},
		layerwise: map[string]bool{"fc.weight": true, "end_point.weight": true},
	}
	def.declared = func(devices int) parallel.Strategy {
		return parallel.Strategy{
			"flatten":            {{1, 1, 1, 1}},
			"fc.matmul":          {{1, 1}, {1, devices}},
			"relu":               {{1, devices}},
			"end_point.matmul":   {{1, devices}, {1, devices}},
			"allreduce":          {{1, 1}},
			"end_point.bias_add": {{1, 1}, {1}},
			"loss":               {{1, 1}},
		}
	}
	return def
}

// cnn is nn.NewCNN's network as operators.
func cnn(x []int, classes int) (*modelDef, error) {
	var ops []opDef
	add := func(o opDef, out []int) []int { ops = append(ops, o); return out }
	conv1, y, err := convOp("conv1", x, nn.Conv2dConfig{In: 3, Out: 16, Kernel: 3, Stride: 1, HasBias: true})
	if err != nil {
		return nil, err
	}
	y = add(conv1, y)
	y = add(reluOp("relu1", y), y)
	pool1, y2, err := maxPoolOp("pool1", y, 2, 2, tensor.Padding{Mode: tensor.PadValid})
	if err != nil {
		return nil, err
	}
	y = add(pool1, y2)
	conv2, y2, err := convOp("conv2", y, nn.Conv2dConfig{In: 16, Out: 32, Kernel: 3, Stride: 1, HasBias: true})
	if err != nil {
		return nil, err
	}
	y = add(conv2, y2)
	y = add(reluOp("relu2", y), y)
	pool2, y2, err := maxPoolOp("pool2", y, 2, 2, tensor.Padding{Mode: tensor.PadValid})
	if err != nil {
		return nil, err
	}
	y = add(pool2, y2)
	return head("cnn", ops, y, classes), nil
}

// head appends the global average pool, flatten, end_point and the loss.
func head(name string, ops []opDef, y []int, classes int) *modelDef {
	mean, y := avgPoolOp("mean", y)
	flat, y := flattenOp("flatten", y)
	n := y[0]
	ops = append(ops, mean, flat,
		denseOp("end_point.matmul", "end_point", n, y[1], classes),
		biasAddOp("end_point.bias_add", "end_point.bias", n, classes),
		lossOp(n, classes))
	return &modelDef{name: name, ops: ops}
}

// resnet is nn.NewResNet20 or nn.NewResNet50 as operators: the stem with
// strategies, each residual block one Block operator.
func resnet(name string, x []int, classes int) (*modelDef, error) {
	var ops []opDef
	y := x
	var eps, momentum float32 = 1e-5, 0.9
	stemOut, kernel, stride := 16, 3, 1
	stages := []struct{ blocks, out, stride int }{{3, 16, 1}, {3, 32, 2}, {3, 64, 2}}
	bottleneck := name == "resnet50"
	if bottleneck {
		eps, stemOut, kernel, stride = 1e-4, 64, 7, 2
		stages = []struct{ blocks, out, stride int }{{3, 256, 1}, {4, 512, 2}, {6, 1024, 2}, {3, 2048, 2}}
	}
	conv1, y, err := convOp("conv1", y, nn.Conv2dConfig{In: 3, Out: stemOut, Kernel: kernel, Stride: stride})
	if err != nil {
		return nil, err
	}
	ops = append(ops, conv1, bnOp("bn1", y, eps, momentum), reluOp("relu", y))
	if bottleneck {
		pool, py, err := maxPoolOp("maxpool", y, 3, 2, tensor.Padding{Mode: tensor.PadSame})
		if err != nil {
			return nil, err
		}
		ops, y = append(ops, pool), py
	}
	in := stemOut
	for s, st := range stages {
		cfg := nn.BlockConfig{In: in, Out: st.out, Stride: st.stride, BNEps: eps, BNMomentum: momentum}
		for b := range st.blocks {
			block, by, err := blockOp(fmt.Sprintf("layer%d.%d", s+1, b), y, cfg, bottleneck)
			if err != nil {
				return nil, err
			}
			ops, y = append(ops, block), by
			cfg.In, cfg.Stride = cfg.Out, 1
		}
		in = st.out
	}
	return head(name, ops, y, classes), nil
}

func elems(shape []int) int64 { return int64(volume(shape)) }

func flattenOp(name string, x []int) (opDef, []int) {
	out := []int{x[0], volume(x[1:])}
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpFlatten, Splittable: "nc",
			Inputs: []parallel.TensorSpec{{Shape: x, Labels: "nchw"}},
			Output: parallel.TensorSpec{Shape: out, Labels: "nc"}},
		build: func(shapes, uint64, *nn.Device) (nn.Layer, error) { return nn.NewFlatten(name), nil },
	}, out
}

// matMulOp is x[n k]·w[k m] with the weight [in, out].
func matMulOp(name, weight string, n, k, m int) opDef {
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpMatMul, Splittable: "nkm", FLOPs: 2 * int64(n) * int64(k) * int64(m),
			Inputs: []parallel.TensorSpec{{Shape: []int{n, k}, Labels: "nk"}, {Name: weight, Shape: []int{k, m}, Labels: "km"}},
			Output: parallel.TensorSpec{Shape: []int{n, m}, Labels: "nm"}},
		build: func(s shapes, seed uint64, dev *nn.Device) (nn.Layer, error) {
			w := s.params[weight]
			return newMatMul(name, weight, w[0], w[1], s.whole, seed, dev)
		},
	}
}

// denseOp is the product of nn.Dense named prefix without its bias:
// x[n k]·wᵀ with w [m k].
func denseOp(name, prefix string, n, k, m int) opDef {
	weight := prefix + ".weight"
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpMatMul, Splittable: "nkm", FLOPs: 2 * int64(n) * int64(k) * int64(m),
			Inputs: []parallel.TensorSpec{{Shape: []int{n, k}, Labels: "nk"}, {Name: weight, Shape: []int{m, k}, Labels: "mk"}},
			Output: parallel.TensorSpec{Shape: []int{n, m}, Labels: "nm"}},
		build: func(s shapes, seed uint64, dev *nn.Device) (nn.Layer, error) {
			w := s.params[weight]
			return nn.NewDense(prefix, w[1], w[0], false, seed, dev)
		},
	}
}

func biasAddOp(name, bias string, n, m int) opDef {
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpBiasAdd, Splittable: "nm", FLOPs: int64(n) * int64(m),
			Inputs: []parallel.TensorSpec{{Shape: []int{n, m}, Labels: "nm"}, {Name: bias, Shape: []int{m}, Labels: "m"}},
			Output: parallel.TensorSpec{Shape: []int{n, m}, Labels: "nm"}},
		build: func(s shapes, _ uint64, dev *nn.Device) (nn.Layer, error) {
			return newBiasAdd(name, bias, s.params[bias][0], dev)
		},
	}
}

func reluOp(name string, shape []int) opDef {
	labels, split, spatial := "nm", "nm", ""
	if len(shape) == 4 {
		labels, split, spatial = "nchw", "nc", "hw"
	}
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpReLU, Splittable: split, Spatial: spatial, FLOPs: elems(shape),
			Inputs: []parallel.TensorSpec{{Shape: shape, Labels: labels}},
			Output: parallel.TensorSpec{Shape: shape, Labels: labels}},
		build: func(_ shapes, _ uint64, dev *nn.Device) (nn.Layer, error) { return nn.NewReLU(name, dev), nil },
	}
}

// reduceSumOp is ReduceSum over the last axis of [n m].
func reduceSumOp(name string, n, m int) opDef {
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpReduceSum, Splittable: "nm", FLOPs: int64(n) * int64(m),
			Inputs: []parallel.TensorSpec{{Shape: []int{n, m}, Labels: "nm"}},
			Output: parallel.TensorSpec{Shape: []int{n}, Labels: "n"}},
		build: func(_ shapes, _ uint64, dev *nn.Device) (nn.Layer, error) {
			return &reduceSum{name: name, dev: dev}, nil
		},
	}
}

// convOp is nn.Conv2d named name on x [N C H W]: batch and output-channel
// splits, and H and W splits with a halo.
func convOp(name string, x []int, cfg nn.Conv2dConfig) (opDef, []int, error) {
	g, err := tensor.NewConvGeom(cfg.In, x[2], x[3], cfg.Kernel, cfg.Kernel, cfg.Stride, cfg.Stride, cfg.Pad)
	if err != nil {
		return opDef{}, nil, fmt.Errorf("operator %s: %w", name, err)
	}
	out := []int{x[0], cfg.Out, g.OutH, g.OutW}
	spec := parallel.OpSpec{Name: name, Kind: parallel.OpConv2D, Splittable: "no", Spatial: "hw",
		FLOPs:  2 * elems(out) * int64(cfg.In*cfg.Kernel*cfg.Kernel),
		Inputs: []parallel.TensorSpec{{Shape: x, Labels: "nchw"}, {Name: name + ".weight", Shape: []int{cfg.Out, cfg.In, cfg.Kernel, cfg.Kernel}, Labels: "ocij"}},
		Output: parallel.TensorSpec{Shape: out, Labels: "nohw"}}
	if cfg.HasBias {
		spec.Extra = []parallel.TensorSpec{{Name: name + ".bias", Shape: []int{cfg.Out}, Labels: "o"}}
	}
	return opDef{spec: spec, window: &g, build: func(s shapes, seed uint64, dev *nn.Device) (nn.Layer, error) {
		c := cfg
		w := s.params[name+".weight"]
		c.Out, c.In = w[0], w[1]
		if s.pad != nil {
			c.Pad = *s.pad
		}
		return nn.NewConv2d(name, c, seed, dev)
	}}, out, nil
}

// bnParams are a BatchNorm's parameters in nn's order, the moving
// statistics frozen (the network checks each against its layer's).
var bnParams = []struct {
	suffix string
	frozen bool
}{{".moving_mean", true}, {".moving_variance", true}, {".gamma", false}, {".beta", false}}

func bnOp(name string, x []int, eps, momentum float32) opDef {
	spec := parallel.OpSpec{Name: name, Kind: parallel.OpBatchNorm, Splittable: "nc", Spatial: "hw", FLOPs: 8 * elems(x),
		Inputs: []parallel.TensorSpec{{Shape: x, Labels: "nchw"}},
		Output: parallel.TensorSpec{Shape: x, Labels: "nchw"}}
	for _, p := range bnParams {
		spec.Extra = append(spec.Extra, parallel.TensorSpec{Name: name + p.suffix, Shape: []int{x[1]}, Labels: "c", Frozen: p.frozen})
	}
	return opDef{spec: spec, build: func(s shapes, _ uint64, dev *nn.Device) (nn.Layer, error) {
		return nn.NewBatchNorm2d(name, nn.BatchNorm2dConfig{Channels: s.in[1], Eps: eps, Momentum: momentum}, dev)
	}}
}

func maxPoolOp(name string, x []int, kernel, stride int, pad tensor.Padding) (opDef, []int, error) {
	g, err := tensor.NewConvGeom(x[1], x[2], x[3], kernel, kernel, stride, stride, pad)
	if err != nil {
		return opDef{}, nil, fmt.Errorf("operator %s: %w", name, err)
	}
	out := []int{x[0], x[1], g.OutH, g.OutW}
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpMaxPool, Splittable: "nc", Spatial: "hw", FLOPs: elems(out) * int64(kernel*kernel),
			Inputs: []parallel.TensorSpec{{Shape: x, Labels: "nchw"}},
			Output: parallel.TensorSpec{Shape: out, Labels: "nchw"}},
		window: &g,
		build: func(s shapes, _ uint64, dev *nn.Device) (nn.Layer, error) {
			p := pad
			if s.pad != nil {
				p = *s.pad
			}
			return nn.NewMaxPool2d(name, kernel, stride, p, dev)
		},
	}, out, nil
}

func avgPoolOp(name string, x []int) (opDef, []int) {
	out := []int{x[0], x[1], 1, 1}
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpAvgPool, Splittable: "nc", FLOPs: elems(x),
			Inputs: []parallel.TensorSpec{{Shape: x, Labels: "nchw"}},
			Output: parallel.TensorSpec{Shape: out, Labels: "nchw"}},
		build: func(shapes, uint64, *nn.Device) (nn.Layer, error) { return nn.NewGlobalAvgPool(name), nil },
	}, out
}

// blockOp is a residual block of nn (NewBottleneck or NewBasicBlock) run as
// one operator: only its batch splits; its parameters, listed as nn builds
// them, are replicated.
func blockOp(name string, x []int, cfg nn.BlockConfig, bottleneck bool) (opDef, []int, error) {
	type conv struct{ in, out, kernel, stride int }
	convs := []conv{{cfg.In, cfg.Out, 3, cfg.Stride}, {cfg.Out, cfg.Out, 3, 1}}
	bns := []string{"bn1d", "bn2d"}
	if bottleneck {
		mid := cfg.Out / 4
		convs = []conv{{cfg.In, mid, 1, 1}, {mid, mid, 3, cfg.Stride}, {mid, cfg.Out, 1, 1}}
		bns = []string{"bn1", "bn2", "bn3"}
	}
	var params []parallel.TensorSpec
	var flops int64
	n, h, w := x[0], x[2], x[3]
	addBN := func(prefix string, channels int) {
		for _, p := range bnParams {
			params = append(params, parallel.TensorSpec{Name: prefix + p.suffix, Shape: []int{channels}, Labels: "p", Frozen: p.frozen})
		}
	}
	addConv := func(prefix string, c conv) error {
		g, err := tensor.NewConvGeom(c.in, h, w, c.kernel, c.kernel, c.stride, c.stride, tensor.Padding{})
		if err != nil {
			return fmt.Errorf("operator %s: %w", name, err)
		}
		h, w = g.OutH, g.OutW
		flops += 2 * int64(n*c.out*g.OutH*g.OutW) * int64(c.in*c.kernel*c.kernel)
		params = append(params, parallel.TensorSpec{Name: prefix + ".weight", Shape: []int{c.out, c.in, c.kernel, c.kernel}, Labels: "pqrs"})
		return nil
	}
	for i, c := range convs {
		if err := addConv(fmt.Sprintf("%s.conv%d", name, i+1), c); err != nil {
			return opDef{}, nil, err
		}
		addBN(name+"."+bns[i], c.out)
	}
	out := []int{n, cfg.Out, h, w}
	if cfg.Stride != 1 || cfg.In != cfg.Out {
		h, w = x[2], x[3]
		if err := addConv(name+".down_sample_layer.0", conv{cfg.In, cfg.Out, 1, cfg.Stride}); err != nil {
			return opDef{}, nil, err
		}
		addBN(name+".down_sample_layer.1", cfg.Out)
	}
	return opDef{
		spec: parallel.OpSpec{Name: name, Kind: parallel.OpBlock, Splittable: "n", FLOPs: flops,
			Inputs: []parallel.TensorSpec{{Shape: x, Labels: "nchw"}},
			Output: parallel.TensorSpec{Shape: out, Labels: "nchw"},
			Extra:  params},
		build: func(_ shapes, seed uint64, dev *nn.Device) (nn.Layer, error) {
			if bottleneck {
				return nn.NewBottleneck(name, cfg, seed, dev)
			}
			return nn.NewBasicBlock(name, cfg, seed, dev)
		},
	}, out, nil
}

// lossOp is the seeds' SoftmaxCrossEntropyExpand: only the batch splits.
func lossOp(n, classes int) opDef {
	return opDef{spec: parallel.OpSpec{Name: "loss", Kind: parallel.OpLoss, Splittable: "n", FLOPs: 4 * int64(n) * int64(classes),
		Inputs: []parallel.TensorSpec{{Shape: []int{n, classes}, Labels: "nm"}},
		Output: parallel.TensorSpec{Shape: []int{}, Labels: ""}}}
}

// allReduceOp is a hybrid_parallel model's explicit AllReduce(sum) over
// all devices.
func allReduceOp(name string, shape []int) opDef {
	return opDef{spec: parallel.OpSpec{Name: name, Kind: parallel.OpAllReduce, FLOPs: elems(shape),
		Inputs: []parallel.TensorSpec{{Shape: shape, Labels: "nm"}},
		Output: parallel.TensorSpec{Shape: shape, Labels: "nm"}}}
}

// paramSpecs returns the parameters of an operator with their layouts.
func paramSpecs(o parallel.OpSpec, ol *parallel.OpLayout) ([]parallel.TensorSpec, []parallel.Layout, [][]int) {
	var specs []parallel.TensorSpec
	var layouts []parallel.Layout
	var partial [][]int
	for k, t := range o.Inputs {
		if t.Name != "" {
			specs, layouts, partial = append(specs, t), append(layouts, ol.Inputs[k]), append(partial, ol.GradPartial[k])
		}
	}
	for k, t := range o.Extra {
		specs, layouts, partial = append(specs, t), append(layouts, ol.Extra[k]), append(partial, ol.ExtraGradPartial[k])
	}
	return specs, layouts, partial
}
