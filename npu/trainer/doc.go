// Package trainer provides the training loop of the simulated NPU core: it
// feeds CIFAR-10 batches (npu/data) through a model (npu/nn), the seeds'
// SoftmaxCrossEntropyExpand loss and a Momentum optimizer (npu/optim),
// prints MindSpore's LossMonitor lines, saves MindSpore checkpoints with
// ModelCheckpoint's rules (npu/ckpt) and measures held-out accuracy.
//
// # Overview
//
//	res, err := trainer.Train(ctx, trainer.Config{DataDir: dir, Epochs: 2, CkptDir: "ckpt_0", Log: w})
//
// One step is Forward, loss, Backward, an optional gradient reduction (the
// data-parallel AllReduce, through Config.Reduce), and an optimizer step.
// Everything is deterministic: the same Config gives bit-identical
// checkpoints, whatever the number of threads.
//
// # Checkpoints
//
// A checkpoint holds every model parameter (MindSpore's names, e.g.
// conv1.weight, bn1.moving_mean, end_point.bias) followed by the optimizer
// state (global_step, learning_rate, momentum, moments.<param>). Loading
// checks names, shapes and dtypes against the model and lists every
// mismatch.
package trainer
