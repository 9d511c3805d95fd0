package nn

import "github.com/mspipe/mspipe/npu/tensor"

// Device is what the layers of one model run on: a worker pool spreading
// kernels over the CPU cores, one scratch buffer the layers share, since
// they run one after another, and a memory capacity the layers' buffers
// are counted against (see SetMemory). A simulated NPU rank owns one
// Device.
type Device struct {
	workers *tensor.Workers
	scratch []float32
	mem     memory
}

// NewDevice returns a device that uses threads goroutines (threads <= 0:
// GOMAXPROCS). Close releases them.
func NewDevice(threads int) *Device {
	return &Device{workers: tensor.NewWorkers(threads)}
}

// Workers returns the device's worker pool.
func (d *Device) Workers() *tensor.Workers { return d.workers }

// Close stops the worker goroutines; the device keeps working on the
// calling goroutine alone.
func (d *Device) Close() { d.workers.Close() }

// scratchFloats returns n floats of shared scratch, valid until the next call.
// It grows (allocates, counted as device memory) only when a larger size is
// first asked for.
func (d *Device) scratchFloats(n int) ([]float32, error) {
	var err error
	d.scratch, err = d.floats("device", "shared workspace", d.scratch, n)
	return d.scratch, err
}

// orSerial returns d, or a device without extra goroutines when d is nil.
func orSerial(d *Device) *Device {
	if d != nil {
		return d
	}
	return NewDevice(1)
}
