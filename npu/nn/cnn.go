package nn

import (
	"github.com/mspipe/mspipe/npu/tensor"
)

// NewCNN builds a small CNN without BatchNorm: conv1 3×3 (3→16, bias) ReLU,
// max pool 2×2/2, conv2 3×3 (16→32, bias) ReLU, max pool 2×2/2, global
// average pool, flatten, end_point Dense. Without BatchNorm every sample's
// gradient is independent of the others in its batch, so data-parallel
// training over N devices computes exactly what one device computes over the
// whole batch (up to float32 rounding): the model the equivalence checks use.
func NewCNN(cfg ResNetConfig) (*Model, error) {
	return cfg.build("cnn", buildCNN)
}

func buildCNN(classes int, seed uint64, dev *Device) (*Model, error) {
	conv1, err := NewConv2d("conv1", Conv2dConfig{In: 3, Out: 16, Kernel: 3, Stride: 1, HasBias: true}, seed, dev)
	if err != nil {
		return nil, err
	}
	conv2, err := NewConv2d("conv2", Conv2dConfig{In: 16, Out: 32, Kernel: 3, Stride: 1, HasBias: true}, seed, dev)
	if err != nil {
		return nil, err
	}
	pool1, err := NewMaxPool2d("pool1", 2, 2, tensor.Padding{Mode: tensor.PadValid}, dev)
	if err != nil {
		return nil, err
	}
	pool2, err := NewMaxPool2d("pool2", 2, 2, tensor.Padding{Mode: tensor.PadValid}, dev)
	if err != nil {
		return nil, err
	}
	head, err := NewDense("end_point", 32, classes, true, seed, dev)
	if err != nil {
		return nil, err
	}
	layers := []Layer{
		conv1, NewReLU("relu1", dev), pool1,
		conv2, NewReLU("relu2", dev), pool2,
		NewGlobalAvgPool("mean"), NewFlatten("flatten"), head,
	}
	return newModel("cnn", dev, layers)
}
