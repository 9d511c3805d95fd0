package ckpt_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/npu/ckpt"
)

func Example() {
	dir, err := os.MkdirTemp("", "ckpt-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	weight, err := ckpt.NewFloat32("fc.weight", []int64{2, 2}, []float32{1, 2, 3, 4})
	if err != nil {
		log.Fatal(err)
	}
	lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})

	path := filepath.Join(dir, ckpt.FileName(ckpt.DefaultPrefix, 1, 32))
	if err := ckpt.Write(path, []ckpt.Tensor{weight, lr}, ckpt.WriteOptions{CRC: true}); err != nil {
		log.Fatal(err)
	}

	tensors, err := ckpt.Read(path)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tensors {
		values, _ := t.Float32s()
		fmt.Println(t.Name, t.DType, t.Dims, values, t.Hash()[:12])
	}
	fmt.Println("same content:", ckpt.Compare([]ckpt.Tensor{weight, lr}, tensors) == nil)
	// Output:
	// fc.weight Float32 [2 2] [1 2 3 4] 5a49f39379ee
	// learning_rate Float32 [] [0.01] 5f15fadcbe87
	// same content: true
}

func ExampleModelCheckpoint() {
	dir, err := os.MkdirTemp("", "ckpt-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	mc, err := ckpt.NewModelCheckpoint("resnet", dir, ckpt.CheckpointConfig{SaveCheckpointSteps: 2, KeepCheckpointMax: 2})
	if err != nil {
		log.Fatal(err)
	}
	params := func() ([]ckpt.Tensor, error) {
		w, err := ckpt.NewFloat32("w", []int64{1}, []float32{0})
		return []ckpt.Tensor{w}, err
	}
	const stepsPerEpoch = 3
	for step := 1; step <= 6; step++ {
		epoch := (step-1)/stepsPerEpoch + 1
		if path, err := mc.StepEnd(epoch, step, stepsPerEpoch, params); err != nil {
			log.Fatal(err)
		} else if path != "" {
			fmt.Println("saved", filepath.Base(path))
		}
	}
	latest, _ := ckpt.Latest(dir, "resnet")
	fmt.Println("resume from", filepath.Base(latest))
	// Output:
	// saved resnet-1_2.ckpt
	// saved resnet-2_1.ckpt
	// saved resnet-2_3.ckpt
	// resume from resnet-2_3.ckpt
}
