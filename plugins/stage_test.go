package plugins

import "testing"

// A step's progress counts global steps of the job, with the loss as the
// LossMonitor prints it (the shortest float32 text).
func TestStepEventProgress(t *testing.T) {
	st := StepEvent{Rank: 0, Epoch: 2, Step: 1, GlobalStep: 157, TotalSteps: 1560, Loss: float64(float32(2.0084016))}
	got := st.Progress()
	want := ProgressEvent{Done: 157, Total: 1560, Unit: "step", Message: "epoch 2, loss 2.0084016"}
	if got != want {
		t.Errorf("progress %+v, want %+v", got, want)
	}
}

// A training step's progress says the epoch, the loss and the device's
// throughput, which the live view shows after the bar.
func TestStepProgress(t *testing.T) {
	st := StepEvent{Epoch: 2, GlobalStep: 40, TotalSteps: 78, Loss: 1.9186287, ImagesPerSecond: 311.6}
	p := st.Progress()
	if p.Done != 40 || p.Total != 78 || p.Unit != "step" || p.Message != "epoch 2, loss 1.9186287, 312 images/s per device" {
		t.Errorf("progress %+v", p)
	}
	st.ImagesPerSecond = 0
	if m := st.Progress().Message; m != "epoch 2, loss 1.9186287" {
		t.Errorf("without a throughput: %q", m)
	}
}
