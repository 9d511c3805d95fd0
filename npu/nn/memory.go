package nn

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/npu/tensor"
)

// ErrOutOfMemory reports an allocation past a device's memory capacity.
var ErrOutOfMemory = errors.New("out of device memory")

// Ascend910Memory is the HBM of one Ascend 910, 32 GiB: the capacity a
// simulated device has unless told otherwise.
const Ascend910Memory int64 = 32 << 30

// memory is what a simulated device holds: every buffer a layer keeps
// (outputs, input gradients, workspaces), the parameters and gradients,
// and what the trainer reserves (optimizer state, the input batch). It
// counts bytes only; the buffers are ordinary Go memory. Accounting runs
// when a buffer is allocated, which happens when a batch shape is first
// seen, never in a steady-state step.
type memory struct {
	mu       sync.Mutex
	capacity int64 // bytes; 0 means unlimited
	used     int64
	peak     int64
	held     map[string]int64  // bytes by what holds them
	byRole   map[string]string // owner+"\x00"+role -> its name in held
}

// SetMemory sets the device's memory capacity in bytes (0: unlimited). It
// fails if more than that is already in use.
func (d *Device) SetMemory(capacity int64) error {
	if capacity < 0 {
		return fmt.Errorf("device memory %d bytes: %w", capacity, ErrConfig)
	}
	m := &d.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	if capacity > 0 && m.used > capacity {
		return fmt.Errorf("%w: %s already in use, more than the %s asked for", ErrOutOfMemory, bytesize.Format(m.used), bytesize.Format(capacity))
	}
	m.capacity = capacity
	return nil
}

// MemoryInUse returns the bytes in use on the device now and at most.
func (d *Device) MemoryInUse() (used, peak int64) {
	d.mem.mu.Lock()
	defer d.mem.mu.Unlock()
	return d.mem.used, d.mem.peak
}

// Reserve accounts n bytes of device memory held by what (replacing what
// held before under that name), for state kept outside the layers such as
// optimizer moments or the input batch. It fails with ErrOutOfMemory,
// naming what, when the device cannot hold it.
func (d *Device) Reserve(what string, n int64) error {
	return d.mem.hold(what, n)
}

func (m *memory) hold(what string, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = map[string]int64{}
	}
	used := m.used - m.held[what] + n
	if m.capacity > 0 && used > m.capacity {
		return fmt.Errorf("%w: %s needs %s, %s of %s in use%s",
			ErrOutOfMemory, what, bytesize.Format(n), bytesize.Format(m.used-m.held[what]), bytesize.Format(m.capacity), m.largestLocked(what))
	}
	m.used = used
	m.peak = max(m.peak, used)
	if n == 0 {
		delete(m.held, what)
	} else {
		m.held[what] = n
	}
	return nil
}

// largestLocked names the three largest holders but skip, for an
// out-of-memory message.
func (m *memory) largestLocked(skip string) string {
	type holder struct {
		what string
		n    int64
	}
	var hs []holder
	for w, n := range m.held {
		if w != skip {
			hs = append(hs, holder{w, n})
		}
	}
	if len(hs) == 0 {
		return ""
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].n > hs[j].n || hs[i].n == hs[j].n && hs[i].what < hs[j].what })
	parts := make([]string, 0, 3)
	for _, h := range hs[:min(3, len(hs))] {
		parts = append(parts, fmt.Sprintf("%s %s", h.what, bytesize.Format(h.n)))
	}
	return " (largest: " + strings.Join(parts, ", ") + ")"
}

// ensure returns t when it already has the shape, else a new zeroed
// tensor held on the device as owner's role (the name an out-of-memory
// error gives). owner and role are separate so the happy path builds no
// string.
func (d *Device) ensure(owner, role string, t *tensor.Tensor, shape ...int) (*tensor.Tensor, error) {
	if t != nil && t.HasShape(shape...) {
		return t, nil
	}
	n := int64(4)
	for _, s := range shape {
		n *= int64(max(s, 0))
	}
	// A copy for the message, so shape itself does not escape and the
	// happy path stays free of allocations.
	what := fmt.Sprintf("%s %s float32%v", owner, role, append([]int(nil), shape...))
	d.mem.release(owner, role) // whatever the owner held in this role before
	if err := d.mem.hold(what, n); err != nil {
		return nil, err
	}
	d.mem.rename(owner, role, what)
	return tensor.New(shape...)
}

// floats is ensure for a plain buffer of n floats: buf when it is large
// enough, else a new one.
func (d *Device) floats(owner, role string, buf []float32, n int) ([]float32, error) {
	if cap(buf) >= n {
		return buf[:n], nil
	}
	what := fmt.Sprintf("%s %s float32[%d]", owner, role, n)
	d.mem.release(owner, role) // whatever the owner held in this role before
	if err := d.mem.hold(what, 4*int64(n)); err != nil {
		return nil, err
	}
	d.mem.rename(owner, role, what)
	return tensor.Alloc(n), nil
}

// The names of held buffers carry their shape, which changes; byRole
// remembers the current name of each owner's role.
func (m *memory) rename(owner, role, what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byRole == nil {
		m.byRole = map[string]string{}
	}
	m.byRole[owner+"\x00"+role] = what
}

// release returns what owner holds in role, if anything.
func (m *memory) release(owner, role string) {
	m.mu.Lock()
	key := owner + "\x00" + role
	what, ok := m.byRole[key]
	delete(m.byRole, key)
	m.mu.Unlock()
	if ok {
		_ = m.hold(what, 0)
	}
}
