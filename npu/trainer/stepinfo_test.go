package trainer

import (
	"context"
	"reflect"
	"testing"
)

// The step hook sees every step in order, with the job's total, the rate
// the schedule applied, a throughput and the device memory in use; a
// resumed job reports only its own steps, numbered after the resumed ones.
func TestStepHookReportsEveryStep(t *testing.T) {
	dataDir := tinyData(t, 8) // 40 images, batch 8: 5 steps per epoch
	ckptDir := t.TempDir()
	cfg := tinyConfig(dataDir, ckptDir)
	cfg.Model, cfg.Schedule, cfg.MaxSteps, cfg.Resume = "cnn", "cosine", 7, true
	var seen []StepInfo
	cfg.OnStep = func(s StepInfo) { seen = append(seen, s) }
	res, err := Train(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 7 || res.StepsPerEpoch != 5 {
		t.Fatalf("%d steps seen, %d per epoch; want 7 and 5", len(seen), res.StepsPerEpoch)
	}
	for i, s := range seen {
		wantEpoch, wantStep := i/5+1, i%5+1
		if s.GlobalStep != i+1 || s.Epoch != wantEpoch || s.StepInEpoch != wantStep || s.StepsPerEpoch != 5 || s.TotalSteps != 7 {
			t.Errorf("step %d: %+v, want global %d, epoch %d step %d of 5, total 7", i, s, i+1, wantEpoch, wantStep)
		}
		if !(s.ImagesPerSec > 0) || s.DeviceMemory <= 0 || !(s.LearningRate > 0) {
			t.Errorf("step %d: images/s %v, memory %d, lr %v: want all positive", i, s.ImagesPerSec, s.DeviceMemory, s.LearningRate)
		}
	}
	// A cosine schedule over 2 epochs lowers the rate step by step.
	if !(seen[6].LearningRate < seen[0].LearningRate) {
		t.Errorf("lr %v at step 1, %v at step 7: want a decay", seen[0].LearningRate, seen[6].LearningRate)
	}
	if seen[6].Loss != res.Loss {
		t.Errorf("last step loss %v, result %v", seen[6].Loss, res.Loss)
	}

	// Resume: the remaining 3 steps, numbered 8 to 10.
	seen = nil
	cfg.MaxSteps = 0
	if _, err := Train(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[0].GlobalStep != 8 || seen[0].Epoch != 2 || seen[0].StepInEpoch != 3 || seen[2].TotalSteps != 10 {
		t.Fatalf("resumed steps %+v, want global steps 8 to 10 of 10 from epoch 2 step 3", seen)
	}
}

// A Config left zero trains with Defaults (the table the npu/train stage's
// schema is built from).
func TestZeroConfigTakesDefaults(t *testing.T) {
	c := Config{DataDir: "d"}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.DataDir = "d"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("zero config with defaults:\n%+v\nwant\n%+v", c, want)
	}
	c = Config{DataDir: "d", NoMomentum: true}
	if err := c.defaults(); err != nil || c.Momentum != 0 {
		t.Errorf("NoMomentum: momentum %v, %v", c.Momentum, err)
	}
}
