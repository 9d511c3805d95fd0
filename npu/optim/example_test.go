package optim_test

import (
	"fmt"

	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/tensor"
)

// One training step of ResNet-20: forward, loss, backward, Momentum update.
func Example() {
	model, err := nn.NewResNet20(nn.ResNetConfig{Seed: 1, NumClasses: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer model.Close()
	opt, err := optim.NewMomentum(model.TrainableParams(), optim.MomentumConfig{
		LearningRates: []float32{0.01}, Momentum: 0.9})
	if err != nil {
		fmt.Println(err)
		return
	}
	loss := nn.NewSoftmaxCrossEntropyExpand()

	images, _ := tensor.New(2, 3, 32, 32) // NCHW
	labels := []int32{3, 7}
	logits, err := model.Forward(images, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := loss.Forward(logits, labels); err != nil {
		fmt.Println(err)
		return
	}
	dlogits, _ := loss.Backward()
	if err := model.Backward(dlogits); err != nil {
		fmt.Println(err)
		return
	}
	opt.Step()

	fmt.Println("logits", logits.Shape())
	for _, p := range model.Params()[:5] {
		fmt.Println(p.Name, p.Shape(), p.Trainable)
	}
	for _, s := range opt.State()[:4] {
		fmt.Println(s.Name, s.DType, s.Shape)
	}
	fmt.Println("global step", opt.GlobalStep())
	// Output:
	// logits [2 10]
	// conv1.weight [16 3 3 3] true
	// bn1.moving_mean [16] false
	// bn1.moving_variance [16] false
	// bn1.gamma [16] true
	// bn1.beta [16] true
	// global_step Int32 [1]
	// learning_rate Float32 [1]
	// momentum Float32 [1]
	// moments.conv1.weight Float32 [16 3 3 3]
	// global step 1
}
