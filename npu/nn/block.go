package nn

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/tensor"
)

// ResidualBlock is y = ReLU(main(x) + shortcut(x)), where shortcut is the
// identity or, when the block changes stride or width, MindSpore's
// down_sample_layer: a 1×1 convolution (index 0) and a BatchNorm2d (index 1).
//
// The main path's last BatchNorm2d computes the sum and the final ReLU in
// the same pass (its output is the block's), and the gradient of the sum is
// added to the first convolution's input gradient as it is written.
type ResidualBlock struct {
	name   string
	main   *Sequential
	head   *Sequential  // main without its last layer
	last   *BatchNorm2d // main's last layer
	first  *Conv2d      // main's first layer
	down   *Sequential  // nil: identity shortcut
	dev    *Device
	dsum   *tensor.Tensor // gradient at the input of the final ReLU
	params []*Param
}

// BlockConfig describes one residual block.
type BlockConfig struct {
	In, Out    int
	Stride     int
	BNEps      float32
	BNMomentum float32
}

// BatchNorm attribute names of MindSpore's blocks: the bottleneck
// ResidualBlock has bn1..bn3, the basic ResidualBlockBase (ResNet-18/34) has
// bn1d and bn2d.
const (
	bottleneckBN1, bottleneckBN2, bottleneckBN3 = "bn1", "bn2", "bn3"
	basicBN1, basicBN2                          = "bn1d", "bn2d"
)

// NewBottleneck builds MindSpore's ResNet-50 ResidualBlock under name (for
// example "layer1.0"): conv1 1×1 In→Out/4, bn1, ReLU, conv2 3×3 with the
// block's stride, bn2, ReLU, conv3 1×1 →Out, bn3, plus the shortcut.
func NewBottleneck(name string, cfg BlockConfig, seed uint64, dev *Device) (*ResidualBlock, error) {
	if cfg.Out%4 != 0 {
		return nil, fmt.Errorf("block %s: out channels %d not divisible by the expansion 4: %w", name, cfg.Out, ErrConfig)
	}
	mid := cfg.Out / 4
	convs := []Conv2dConfig{
		{In: cfg.In, Out: mid, Kernel: 1, Stride: 1},
		{In: mid, Out: mid, Kernel: 3, Stride: cfg.Stride},
		{In: mid, Out: cfg.Out, Kernel: 1, Stride: 1},
	}
	return newResidualBlock(name, cfg, convs, []string{bottleneckBN1, bottleneckBN2, bottleneckBN3}, seed, dev)
}

// NewBasicBlock builds MindSpore's ResidualBlockBase under name: conv1 3×3
// with the block's stride, bn1d, ReLU, conv2 3×3, bn2d, plus the shortcut.
func NewBasicBlock(name string, cfg BlockConfig, seed uint64, dev *Device) (*ResidualBlock, error) {
	convs := []Conv2dConfig{
		{In: cfg.In, Out: cfg.Out, Kernel: 3, Stride: cfg.Stride},
		{In: cfg.Out, Out: cfg.Out, Kernel: 3, Stride: 1},
	}
	return newResidualBlock(name, cfg, convs, []string{basicBN1, basicBN2}, seed, dev)
}

func newResidualBlock(name string, cfg BlockConfig, convs []Conv2dConfig, bnNames []string, seed uint64, dev *Device) (*ResidualBlock, error) {
	if cfg.In <= 0 || cfg.Out <= 0 || cfg.Stride <= 0 {
		return nil, fmt.Errorf("block %s: in %d, out %d, stride %d must be positive: %w", name, cfg.In, cfg.Out, cfg.Stride, ErrConfig)
	}
	dev = orSerial(dev)
	var layers []Layer
	for i, cc := range convs {
		conv, err := NewConv2d(fmt.Sprintf("%s.conv%d", name, i+1), cc, seed, dev)
		if err != nil {
			return nil, err
		}
		bn, err := NewBatchNorm2d(name+"."+bnNames[i], BatchNorm2dConfig{Channels: cc.Out, Eps: cfg.BNEps, Momentum: cfg.BNMomentum}, dev)
		if err != nil {
			return nil, err
		}
		layers = append(layers, conv, bn)
		if i < len(convs)-1 {
			layers = append(layers, NewReLU(fmt.Sprintf("%s.relu%d", name, i+1), dev))
		}
	}
	b := &ResidualBlock{name: name, main: NewSequential(name, layers...), dev: dev,
		head: NewSequential(name, layers[:len(layers)-1]...), first: layers[0].(*Conv2d), last: layers[len(layers)-1].(*BatchNorm2d)}
	if cfg.Stride != 1 || cfg.In != cfg.Out {
		conv, err := NewConv2d(name+".down_sample_layer.0", Conv2dConfig{In: cfg.In, Out: cfg.Out, Kernel: 1, Stride: cfg.Stride}, seed, dev)
		if err != nil {
			return nil, err
		}
		bn, err := NewBatchNorm2d(name+".down_sample_layer.1", BatchNorm2dConfig{Channels: cfg.Out, Eps: cfg.BNEps, Momentum: cfg.BNMomentum}, dev)
		if err != nil {
			return nil, err
		}
		b.down = NewSequential(name+".down_sample_layer", conv, bn)
	}
	b.params = b.main.Params()
	if b.down != nil {
		b.params = append(b.params, b.down.Params()...)
	}
	return b, nil
}

// Params returns the main path's parameters, then the shortcut's.
func (b *ResidualBlock) Params() []*Param { return b.params }

// Forward computes ReLU(main(x) + shortcut(x)).
func (b *ResidualBlock) Forward(x *tensor.Tensor, train bool) (*tensor.Tensor, error) {
	h, err := b.head.Forward(x, train)
	if err != nil {
		return nil, err
	}
	s := x
	if b.down != nil {
		if s, err = b.down.Forward(x, train); err != nil {
			return nil, err
		}
	}
	if !tensor.SameShape(h, s) {
		return nil, fmt.Errorf("block %s: main path %v and shortcut %v differ: %w", b.name, h.Shape(), s.Shape(), tensor.ErrShape)
	}
	if b.dsum, err = b.dev.ensure(b.name, "gradient sum", b.dsum, h.Shape()...); err != nil {
		return nil, fmt.Errorf("block %s gradient: %w", b.name, err)
	}
	return b.last.forward(h, train, true, s.Data())
}

// Backward returns dL/dx, the sum of the gradients through both paths.
func (b *ResidualBlock) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if b.dsum == nil {
		return nil, fmt.Errorf("block %s: %w", b.name, ErrNoForward)
	}
	if err := checkGrad("block", b.name, b.last.y, dy); err != nil {
		return nil, err
	}
	// The last BatchNorm2d masks dy by the final ReLU into dsum, the
	// gradient of the sum, which the shortcut needs too.
	dh, err := b.last.backward(dy, b.dsum.Data())
	if err != nil {
		return nil, err
	}
	dshort := b.dsum
	if b.down != nil {
		if dshort, err = b.down.Backward(b.dsum); err != nil {
			return nil, err
		}
	}
	if dh, err = b.head.backwardTo(dh, 1); err != nil {
		return nil, err
	}
	return b.first.backward(dh, dshort.Data())
}
