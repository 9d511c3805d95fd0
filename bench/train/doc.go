// Command train provides the mspipe side of the side-by-side training
// benchmark of bench/train/run.sh: ResNet-20 (npu/nn.NewResNet20) trained
// with SoftmaxCrossEntropyExpand and Momentum on one random CIFAR-shaped
// batch, timed over warm-up plus measured steps, reported as one JSON line.
// torch_resnet20.py is the PyTorch peer with the same architecture.
//
// Usage:
//
//	go run ./bench/train -threads 2 -warmup 3 -steps 20
package main
