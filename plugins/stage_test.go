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
