package nn

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/bytesize"
)

// trainStep runs forward, loss and backward on a random batch of n 16×16
// images.
func trainStep(t *testing.T, m *Model, n int) error {
	t.Helper()
	r := rand.New(rand.NewPCG(7, uint64(n)))
	x := randTensor(t, r, n, 3, 16, 16)
	labels := make([]int32, n)
	logits, err := m.Forward(x, true)
	if err != nil {
		return err
	}
	loss := NewSoftmaxCrossEntropyExpand()
	if _, err := loss.Forward(logits, labels); err != nil {
		return err
	}
	d, err := loss.Backward()
	if err != nil {
		return err
	}
	return m.Backward(d)
}

// The device counts every buffer once: parameters and gradients from the
// start, a batch size's buffers once, replaced (not added) when the batch
// size changes.
func TestDeviceMemoryAccounting(t *testing.T) {
	m, err := NewResNet20(ResNetConfig{Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	params, _ := m.Device().MemoryInUse()
	if want := 4 * int64(len(m.Values())+len(m.Grads())); params != want {
		t.Fatalf("after building: %d bytes in use, want parameters and gradients, %d", params, want)
	}
	if err := trainStep(t, m, 8); err != nil {
		t.Fatal(err)
	}
	at8, peak := m.Device().MemoryInUse()
	if at8 <= params || peak != at8 {
		t.Fatalf("after a batch of 8: %d in use (peak %d), want more than the %d of the parameters", at8, peak, params)
	}
	if err := trainStep(t, m, 8); err != nil {
		t.Fatal(err)
	}
	if again, _ := m.Device().MemoryInUse(); again != at8 {
		t.Fatalf("a second batch of 8 changed the memory in use from %d to %d", at8, again)
	}
	if err := trainStep(t, m, 2); err != nil {
		t.Fatal(err)
	}
	at2, peak2 := m.Device().MemoryInUse()
	if at2 >= at8 || at2 <= params || peak2 < at8 {
		t.Fatalf("after a batch of 2: %d in use, peak %d; want between %d and %d, peak at least %d", at2, peak2, params, at8, at8)
	}
}

// A device too small for the model fails where a real one would: building
// it when the parameters do not fit, the first step when a buffer does
// not, naming what did not fit.
func TestOutOfMemoryNamesTheBuffer(t *testing.T) {
	probe, err := NewResNet20(ResNetConfig{Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, g := 4*int64(len(probe.Values())), 4*int64(len(probe.Grads()))
	probe.Close()

	_, err = NewResNet20(ResNetConfig{Seed: 1, Threads: 1, Memory: p + g/2})
	want := "out of device memory: resnet20 gradients needs " + bytesize.Format(g) + ", " + bytesize.Format(p) + " of " + bytesize.Format(p+g/2) +
		" in use (largest: resnet20 parameters " + bytesize.Format(p) + ")"
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), want) {
		t.Fatalf("building on a small device: %v, want ...%s", err, want)
	}

	m, err := NewResNet20(ResNetConfig{Seed: 1, Threads: 1, Memory: p + g + 64<<10})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = trainStep(t, m, 8)
	want = "out of device memory: conv1 output float32[8 16 16 16] needs 128.0 KiB, " + bytesize.Format(p+g) + " of " + bytesize.Format(p+g+64<<10) + " in use"
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a step: %v, want ...%s", err, want)
	}
	// Raising the capacity lets the same model go on.
	if err := m.Device().SetMemory(Ascend910Memory); err != nil {
		t.Fatal(err)
	}
	if err := trainStep(t, m, 8); err != nil {
		t.Fatalf("after raising the capacity: %v", err)
	}
}

// A buffer a layer drops is no longer counted, and one it replaces is
// counted once: a stride-2 3×3 convolution takes the packed-input path on
// even inputs and im2col on odd ones.
func TestDroppedBuffersAreReleased(t *testing.T) {
	dev := NewDevice(1)
	defer dev.Close()
	c, err := NewConv2d("c", Conv2dConfig{In: 16, Out: 16, Kernel: 3, Stride: 2}, 1, dev)
	if err != nil {
		t.Fatal(err)
	}
	packed := func() int {
		n := 0
		for what := range dev.mem.held {
			if strings.Contains(what, "packed input") {
				n++
			}
		}
		return n
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ side, want int }{{32, 1}, {33, 0}, {16, 1}, {32, 1}} {
		if _, err := c.Forward(randTensor(t, r, 2, 16, tc.side, tc.side), true); err != nil {
			t.Fatal(err)
		}
		if got := packed(); got != tc.want {
			t.Errorf("after a %d×%d input: %d packed-input buffers counted, want %d", tc.side, tc.side, got, tc.want)
		}
		var sum int64
		for _, n := range dev.mem.held {
			sum += n
		}
		if used, _ := dev.MemoryInUse(); used != sum {
			t.Errorf("after a %d×%d input: %d bytes in use, the held buffers add up to %d", tc.side, tc.side, used, sum)
		}
	}
}
