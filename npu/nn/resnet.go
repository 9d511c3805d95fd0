package nn

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/tensor"
)

// ResNetConfig configures a ResNet model.
type ResNetConfig struct {
	NumClasses int    // classes of the end_point layer; 0 means 10 (CIFAR-10)
	Seed       uint64 // seed of the deterministic initialisation
	Threads    int    // worker goroutines; 0 means GOMAXPROCS
	// Memory is the device's memory capacity in bytes (0: unlimited);
	// building or running the model past it fails with ErrOutOfMemory
	// naming the buffer.
	Memory int64
}

// build makes the device a model of cfg runs on and builds the model
// named name on it; the device is closed again if that fails.
func (cfg ResNetConfig) build(name string, build func(classes int, seed uint64, dev *Device) (*Model, error)) (*Model, error) {
	classes, err := cfg.classes()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	dev := NewDevice(cfg.Threads)
	if err := dev.SetMemory(cfg.Memory); err != nil {
		dev.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	m, err := build(classes, cfg.Seed, dev)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// Model is a network with its parameters packed in fixed order, ready for a
// training loop: Forward, a loss, Backward, an optimizer step.
type Model struct {
	name   string
	net    *Sequential
	dev    *Device
	params []*Param
	values []float32
	grads  []float32
}

// Name returns the model's name, "resnet50" or "resnet20".
func (m *Model) Name() string { return m.name }

// Params returns every parameter, trainable or not, in MindSpore's order.
func (m *Model) Params() []*Param { return m.params }

// TrainableParams returns the parameters an optimizer updates, in order.
func (m *Model) TrainableParams() []*Param {
	var ps []*Param
	for _, p := range m.params {
		if p.Trainable {
			ps = append(ps, p)
		}
	}
	return ps
}

// Values returns all parameter values as one slice in Params order; each
// Param's Value is a view of it.
func (m *Model) Values() []float32 { return m.values }

// Grads returns the gradients of the trainable parameters as one slice in
// TrainableParams order; each Param's Grad is a view of it, so a data-parallel
// AllReduce can reduce it in place.
func (m *Model) Grads() []float32 { return m.grads }

// SetGradBuffer moves the gradients into buf (which must have the length
// of Grads): every trainable Param's Grad becomes a view of it, so a
// communicator can reduce gradients in memory it provides, such as shared
// memory between rank processes.
func (m *Model) SetGradBuffer(buf []float32) error {
	if len(buf) != len(m.grads) {
		return fmt.Errorf("%s: gradient buffer of %d elements, want %d: %w", m.name, len(buf), len(m.grads), ErrConfig)
	}
	copy(buf, m.grads)
	off := 0
	for _, p := range m.params {
		if !p.Trainable {
			continue
		}
		n := p.Value.Len()
		g, err := tensor.FromSlice(buf[off:off+n:off+n], p.Value.Shape()...)
		if err != nil {
			return fmt.Errorf("%s: parameter %s gradient: %w", m.name, p.Name, err)
		}
		p.Grad = g
		off += n
	}
	m.grads = buf
	return nil
}

// Device returns the device the model runs on.
func (m *Model) Device() *Device { return m.dev }

// Close stops the model's worker goroutines.
func (m *Model) Close() { m.dev.Close() }

// Forward returns the logits [N NumClasses] for an [N 3 H W] batch. train
// selects batch statistics in BatchNorm and updates their moving statistics.
// The returned tensor belongs to the model and is overwritten by the next
// Forward.
func (m *Model) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	y, err := m.net.Forward(x, train)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.name, err)
	}
	return y, nil
}

// Backward back-propagates dL/dlogits through the last Forward and
// overwrites every trainable gradient.
func (m *Model) Backward(dlogits *tensor.Tensor) error {
	if _, err := m.net.Backward(dlogits); err != nil {
		return fmt.Errorf("%s: %w", m.name, err)
	}
	return nil
}

func newModel(name string, dev *Device, layers []Layer) (*Model, error) {
	m := &Model{name: name, net: NewSequential(name, layers...), dev: dev}
	if c, ok := layers[0].(*Conv2d); ok {
		c.skipInputGrad = true // Backward's result is dropped: no one needs dL/dimages
	}
	m.params = m.net.Params()
	var err error
	if m.values, m.grads, err = Pack(m.params); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := dev.Reserve(name+" parameters", 4*int64(len(m.values))); err != nil {
		return nil, err
	}
	if err := dev.Reserve(name+" gradients", 4*int64(len(m.grads))); err != nil {
		return nil, err
	}
	return m, nil
}

// stage appends count blocks named prefix.0 … prefix.(count−1); the first
// changes width and stride, the rest keep them.
func stage(layers []Layer, prefix string, count int, first BlockConfig, seed uint64, dev *Device,
	build func(string, BlockConfig, uint64, *Device) (*ResidualBlock, error)) ([]Layer, error) {
	cfg := first
	for i := 0; i < count; i++ {
		b, err := build(fmt.Sprintf("%s.%d", prefix, i), cfg, seed, dev)
		if err != nil {
			return nil, err
		}
		layers = append(layers, b)
		cfg.In, cfg.Stride = cfg.Out, 1
	}
	return layers, nil
}

func (c ResNetConfig) classes() (int, error) {
	if c.NumClasses < 0 {
		return 0, fmt.Errorf("num classes %d: %w", c.NumClasses, ErrConfig)
	}
	if c.NumClasses == 0 {
		return 10, nil
	}
	return c.NumClasses, nil
}

// NewResNet50 builds MindSpore model_zoo's resnet50: conv1 7×7/2 (3→64,
// pad "same"), bn1, ReLU, max pool 3×3/2 ("same"), four stages of bottleneck
// blocks [3, 4, 6, 3] with outputs 256, 512, 1024, 2048 and strides 1, 2, 2,
// 2, global average pool, flatten and the end_point Dense. BatchNorms use
// eps 1e-4 and momentum 0.9 as model_zoo's _bn.
func NewResNet50(cfg ResNetConfig) (*Model, error) {
	return cfg.build("resnet50", buildResNet50)
}

func buildResNet50(classes int, seed uint64, dev *Device) (*Model, error) {
	const eps, momentum = 1e-4, 0.9
	conv1, err := NewConv2d("conv1", Conv2dConfig{In: 3, Out: 64, Kernel: 7, Stride: 2}, seed, dev)
	if err != nil {
		return nil, err
	}
	bn1, err := NewBatchNorm2d("bn1", BatchNorm2dConfig{Channels: 64, Eps: eps, Momentum: momentum}, dev)
	if err != nil {
		return nil, err
	}
	pool, err := NewMaxPool2d("maxpool", 3, 2, tensor.Padding{Mode: tensor.PadSame}, dev)
	if err != nil {
		return nil, err
	}
	layers := []Layer{conv1, bn1, NewReLU("relu", dev), pool}
	in := 64
	for i, s := range []struct{ blocks, out, stride int }{{3, 256, 1}, {4, 512, 2}, {6, 1024, 2}, {3, 2048, 2}} {
		first := BlockConfig{In: in, Out: s.out, Stride: s.stride, BNEps: eps, BNMomentum: momentum}
		if layers, err = stage(layers, fmt.Sprintf("layer%d", i+1), s.blocks, first, seed, dev, NewBottleneck); err != nil {
			return nil, err
		}
		in = s.out
	}
	head, err := NewDense("end_point", in, classes, true, seed, dev)
	if err != nil {
		return nil, err
	}
	layers = append(layers, NewGlobalAvgPool("mean"), NewFlatten("flatten"), head)
	return newModel("resnet50", dev, layers)
}

// NewResNet20 builds the small CIFAR ResNet that is the CPU default:
// conv1 3×3 (3→16, pad "same"), bn1, ReLU, three stages of three basic
// blocks with 16, 32 and 64 channels (stride 2 at the start of stages 2 and
// 3, where a 1×1 down_sample_layer matches the shortcut), global average
// pool, flatten and the end_point Dense. Names follow MindSpore's ResNet:
// conv1, bn1, layerS.B.conv1/bn1d/conv2/bn2d, layerS.B.down_sample_layer.0/1,
// end_point. BatchNorms use MindSpore's defaults, eps 1e-5 and momentum 0.9.
func NewResNet20(cfg ResNetConfig) (*Model, error) {
	return cfg.build("resnet20", buildResNet20)
}

func buildResNet20(classes int, seed uint64, dev *Device) (*Model, error) {
	const eps, momentum = 1e-5, 0.9
	conv1, err := NewConv2d("conv1", Conv2dConfig{In: 3, Out: 16, Kernel: 3, Stride: 1}, seed, dev)
	if err != nil {
		return nil, err
	}
	bn1, err := NewBatchNorm2d("bn1", BatchNorm2dConfig{Channels: 16, Eps: eps, Momentum: momentum}, dev)
	if err != nil {
		return nil, err
	}
	layers := []Layer{conv1, bn1, NewReLU("relu", dev)}
	in := 16
	for i, s := range []struct{ out, stride int }{{16, 1}, {32, 2}, {64, 2}} {
		first := BlockConfig{In: in, Out: s.out, Stride: s.stride, BNEps: eps, BNMomentum: momentum}
		if layers, err = stage(layers, fmt.Sprintf("layer%d", i+1), 3, first, seed, dev, NewBasicBlock); err != nil {
			return nil, err
		}
		in = s.out
	}
	head, err := NewDense("end_point", in, classes, true, seed, dev)
	if err != nil {
		return nil, err
	}
	layers = append(layers, NewGlobalAvgPool("mean"), NewFlatten("flatten"), head)
	return newModel("resnet20", dev, layers)
}
