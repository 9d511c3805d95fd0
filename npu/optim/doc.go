// Package optim provides MindSpore's Momentum optimizer and the
// learning-rate schedules of MindSpore's ResNet examples.
//
// # Overview
//
//	lrs, err := optim.LearningRates(optim.Schedule{Mode: "cosine", LRMax: 0.1,
//		WarmupEpochs: 1, TotalEpochs: 90, StepsPerEpoch: 1563})
//	opt, err := optim.NewMomentum(model.TrainableParams(), optim.MomentumConfig{
//		LearningRates: lrs, Momentum: 0.9, WeightDecay: 1e-4})
//	// each step: forward, loss, backward (fills the gradients), then
//	opt.Step()
//
// # Update rule
//
// As MindSpore's ApplyMomentum: accum = momentum·accum + grad, then
// param −= lr·accum (use_nesterov=false) or param −= lr·grad + lr·momentum·accum
// (use_nesterov=true). With weight_decay > 0, grad becomes grad +
// weight_decay·param for the parameters MindSpore's default filter selects:
// names without "beta" or "gamma". The learning rate of a step is
// LearningRates[global_step] (the last one once the schedule is exhausted),
// and every Step increments global_step.
//
// # State
//
// State lists what MindSpore saves with the optimizer, in its order:
// global_step (Int32, [1]), learning_rate (Float32, [1] for a constant rate,
// [steps] for a schedule), momentum (Float32, [1]) and moments.<name> for each
// parameter (Float32, the parameter's shape). The entries alias the
// optimizer's storage, so a checkpoint loader restores state by writing them.
package optim
