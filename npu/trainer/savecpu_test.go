package trainer

import (
	"bytes"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/optim"
)

// BenchmarkSaveEveryStepResNet20 is what save_checkpoint_steps: 1 adds to a
// ResNet-20 rank's step: the snapshot into the reused staging buffer, the
// encode, the write with its sidecar digest and fsyncs, and the pruning to
// keep_checkpoint_max 5, as npu/train writes them. It reports the process's
// CPU time (user and system, from getrusage) per save besides the wall time:
// the figure async_save cannot hide when every core is busy training.
func BenchmarkSaveEveryStepResNet20(b *testing.B) {
	for _, mode := range []struct {
		name  string
		async bool
	}{{"sync", false}, {"async", true}} {
		b.Run(mode.name, func(b *testing.B) {
			m, err := NewModel("resnet20", 1, 1)
			if err != nil {
				b.Fatal(err)
			}
			opt, err := optim.NewMomentum(m.TrainableParams(), optim.MomentumConfig{LearningRates: []float32{0.01}, Momentum: 0.9})
			if err != nil {
				b.Fatal(err)
			}
			mc, err := ckpt.NewModelCheckpoint("CKP", b.TempDir(), ckpt.CheckpointConfig{
				SaveCheckpointSteps: 1, KeepCheckpointMax: 5,
				Write: ckpt.WriteOptions{Digest: true}, AsyncSave: mode.async,
			})
			if err != nil {
				b.Fatal(err)
			}
			var staging []ckpt.Tensor
			snapshot := func() ([]ckpt.Tensor, error) {
				t, err := snapshotInto(staging, m, opt)
				staging = t
				return t, err
			}
			// One save first: the staging buffer and the encoder's scratch
			// are allocated once per run, not per save.
			if _, err := mc.StepEnd(1, 1, 1<<30, snapshot); err != nil {
				b.Fatal(err)
			}
			if _, err := mc.Wait(); err != nil {
				b.Fatal(err)
			}
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := mc.StepEnd(1, i+2, 1<<30, snapshot); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := mc.Wait(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/save")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPutFloat32sIsLittleEndianIEEE checks the bytes a snapshot holds for
// values whose bits matter: signed zero, a NaN payload, a subnormal.
func TestPutFloat32sIsLittleEndianIEEE(t *testing.T) {
	values := []float32{1, float32(math.Copysign(0, -1)), math.Float32frombits(0x7fc00123), math.Float32frombits(0x00000001), -2.5}
	want := []byte{
		0x00, 0x00, 0x80, 0x3f,
		0x00, 0x00, 0x00, 0x80,
		0x23, 0x01, 0xc0, 0x7f,
		0x01, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x20, 0xc0,
	}
	got := make([]byte, len(want))
	putFloat32s(got, values)
	if !bytes.Equal(got, want) {
		t.Errorf("putFloat32s = % x, want % x", got, want)
	}
}
