// Package nn provides the layers, the loss and the ResNet models of the
// simulated NPU, each with a forward and a backward pass.
//
// # Overview
//
//	m, err := nn.NewResNet20(nn.ResNetConfig{Seed: 1})
//	defer m.Close()
//	loss := nn.NewSoftmaxCrossEntropyExpand()
//	logits, err := m.Forward(images, true) // images: [N 3 32 32]
//	l, err := loss.Forward(logits, labels)   // labels: N class indices
//	dlogits, err := loss.Backward()
//	err = m.Backward(dlogits)                // fills m.Grads()
//	// an optimizer (npu/optim) then updates m.TrainableParams()
//
// # Layouts and shape rules
//
// Images are NCHW float32 tensors. Conv2d weights are [Out In K K], Dense
// weights [Out In] (y = x·Wᵀ + b), BatchNorm2d parameters [C]. Conv2d and
// MaxPool2d take MindSpore's pad modes: "same" gives ceil(H/stride) outputs
// with the odd padding row at the bottom/right, "valid" none, "pad" explicit.
// Conv2d: [N In H W] → [N Out OH OW]. BatchNorm2d and ReLU keep the shape.
// GlobalAvgPool: [N C H W] → [N C 1 1]. Flatten: [N ...] → [N rest].
// Dense: [N In] → [N Out]. SoftmaxCrossEntropyExpand: logits [N Classes] and
// N labels in [0, Classes) → a scalar, the mean over the batch.
//
// A layer's Forward returns a tensor it owns, valid until its next Forward;
// Backward returns dL/dx, also owned by the layer, and overwrites the
// gradients of the layer's trainable parameters. Buffers are allocated the
// first time a batch shape is seen; later steps of the same shape allocate
// nothing. A wrong input shape is an error wrapping tensor.ErrShape that names
// the layer.
//
// # Parameters
//
// Names follow MindSpore's model_zoo ResNet (official/cv/ResNet/src/resnet.py):
// conv1.weight; bn1.moving_mean, bn1.moving_variance, bn1.gamma, bn1.beta (in
// that order, as _BatchNorm creates them); layer1.0.conv1.weight,
// layer1.0.bn1.gamma, ... for the bottleneck blocks of ResNet-50 (bn1..bn3)
// and layer1.0.bn1d.gamma, layer1.0.bn2d.gamma for the basic blocks of
// ResNet-20 (MindSpore's ResidualBlockBase names); the shortcut is
// layerS.B.down_sample_layer.0.weight (1×1 conv) and
// layerS.B.down_sample_layer.1.* (its BatchNorm); the head is end_point.weight
// and end_point.bias. Model.Params lists every parameter in that order with
// its shape (dtype DType, "Float32"); moving statistics are not trainable.
// Model.Values and Model.Grads expose values and trainable gradients as two
// flat slices in parameter order.
//
// # Initialisation
//
// Deterministic from ResNetConfig.Seed: every parameter draws from its own
// SplitMix64 stream seeded with Seed XOR FNV-1a(name), so the same seed gives
// bit-identical parameters. As model_zoo's ResNet: convolution weights
// N(0, 2/(Out·K·K)) (He, fan_out, ReLU gain); Dense weights U(−1/√In, 1/√In)
// (He uniform, a = √5) and zero bias; BatchNorm gamma 1, beta 0, moving mean
// 0, moving variance 1.
//
// # BatchNorm
//
// Training uses the batch mean and biased variance over N·H·W and updates
// moving = momentum·moving + (1−momentum)·batch (MindSpore's convention:
// momentum 0.9 keeps 90% of the old value). Inference uses the moving
// statistics.
//
// # Fused passes
//
// Inside a Sequential, a BatchNorm2d followed by a ReLU normalises and
// clamps in one pass, and their backward masks and sums in one. The last
// BatchNorm2d of a ResidualBlock also adds the shortcut and applies the
// block's ReLU; the shortcut's gradient is added to the block's input
// gradient as the first convolution writes it. 3×3 convolutions with at
// least 8 input channels skip im2col (tensor.Conv3x3): stride 1 with "same"
// padding, and stride 2 over an even-sized input with an output of half its
// size (the first convolution of a ResNet stage); the others keep the whole
// batch's im2col columns from Forward for Backward when they fit. The model's first convolution computes no input
// gradient: nothing consumes the gradient of the images.
//
// # Threads and determinism
//
// A Model owns a Device: a worker pool (ResNetConfig.Threads goroutines) and
// a scratch buffer shared by its layers. Parallel kernels split work so each
// output element is computed by one worker in a fixed order, so results are
// bit-identical for every thread count. Work is split by image wherever it
// can be, BatchNorm included (its per-channel sums are per-plane partial
// sums added in image order afterwards), so each core keeps to the same
// images from layer to layer; only the weight gradients read every image.
package nn
