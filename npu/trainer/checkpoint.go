package trainer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"unsafe"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/optim"
	"github.com/mspipe/mspipe/npu/parallel"
)

// ErrMismatch is wrapped by the error of Restore when a checkpoint does not
// fit the model.
var ErrMismatch = errors.New("checkpoint does not match the model")

// Parameterized is a network with named parameters: an nn.Model, or one
// rank's part of a sharded network (its slices).
type Parameterized interface {
	Name() string
	Params() []*nn.Param
}

// Snapshot returns the tensors a checkpoint holds: the model's parameters
// in order, then the optimizer's state (nil opt: parameters only).
func Snapshot(m Parameterized, opt *optim.Momentum) ([]ckpt.Tensor, error) {
	return snapshotInto(nil, m, opt)
}

// snapshotInto is Snapshot copying into the buffers of prev, the tensors an
// earlier call returned, where they fit: a checkpoint every step then
// allocates (and first touches) its host copy once. The caller must be done
// with prev: its save was written (ckpt.ModelCheckpoint calls the params
// function of an async_save only once the previous write is committed).
func snapshotInto(prev []ckpt.Tensor, m Parameterized, opt *optim.Momentum) ([]ckpt.Tensor, error) {
	out := prev[:0]
	// next returns the tensor to fill for name, reusing prev's slot at the
	// same place (out shares prev's array: the slot is read before append
	// overwrites it).
	next := func(name string, shape []int, dtype string, elems int) (ckpt.Tensor, error) {
		var t ckpt.Tensor
		if i := len(out); i < len(prev) {
			t = prev[i]
		}
		t.Name, t.DType = name, dtype
		t.Dims = t.Dims[:0]
		for _, d := range shape {
			t.Dims = append(t.Dims, int64(d))
		}
		if n, err := t.NumElements(); err != nil || n != int64(elems) {
			return ckpt.Tensor{}, fmt.Errorf("tensor %q: %d values for dims %v: %w", name, elems, shape, ckpt.ErrShape)
		}
		if cap(t.Data) < 4*elems {
			t.Data = make([]byte, 4*elems)
		}
		t.Data = t.Data[:4*elems]
		return t, nil
	}
	for _, p := range m.Params() {
		values := p.Value.Data()
		t, err := next(p.Name, p.Shape(), ckpt.DTypeFloat32, len(values))
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %w", p.Name, err)
		}
		putFloat32s(t.Data, values)
		out = append(out, t)
	}
	if opt == nil {
		return out, nil
	}
	for _, s := range opt.State() {
		switch {
		case s.F32 != nil:
			t, err := next(s.Name, s.Shape, ckpt.DTypeFloat32, len(s.F32))
			if err != nil {
				return nil, fmt.Errorf("optimizer state: %w", err)
			}
			putFloat32s(t.Data, s.F32)
			out = append(out, t)
		case s.I32 != nil:
			t, err := next(s.Name, s.Shape, ckpt.DTypeInt32, len(s.I32))
			if err != nil {
				return nil, fmt.Errorf("optimizer state: %w", err)
			}
			for i, v := range s.I32 {
				binary.LittleEndian.PutUint32(t.Data[4*i:], uint32(v))
			}
			out = append(out, t)
		default:
			return nil, fmt.Errorf("optimizer state %s: no data", s.Name)
		}
	}
	return out, nil
}

// putFloat32s writes values into dst (4 bytes each) as a checkpoint holds
// them: little-endian IEEE 754. On a little-endian host that is the values'
// own memory, copied in one memmove: a save every step spent about 1 ms of
// a ResNet-20 rank's CPU converting them one by one.
func putFloat32s(dst []byte, values []float32) {
	if hostLittleEndian && len(values) > 0 {
		copy(dst[:4*len(values)], unsafe.Slice((*byte)(unsafe.Pointer(&values[0])), 4*len(values)))
		return
	}
	for i, v := range values {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// hostLittleEndian reports whether this machine stores a uint32 low byte
// first, as a checkpoint does.
var hostLittleEndian = func() bool {
	x := uint32(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

func dims64(shape []int) []int64 {
	out := make([]int64, len(shape))
	for i, d := range shape {
		out[i] = int64(d)
	}
	return out
}

// RestoreOptions says what Restore requires of a checkpoint.
type RestoreOptions struct {
	// Optimizer, when non-nil, is restored too if the checkpoint holds its
	// state (it must then hold all of it).
	Optimizer *optim.Momentum
	// RequireOptimizer fails when the checkpoint has no optimizer state
	// (resuming an interrupted run needs it; starting from weights does not).
	RequireOptimizer bool
	// OwnHyperparameters keeps the optimizer's learning_rate and momentum:
	// a new training started from another's checkpoint applies the rates
	// it was configured with, not the checkpoint's (whose schedule may
	// have another length). The moments and global_step are still loaded.
	OwnHyperparameters bool
	// Layouts, for a sharded network, are its parameters' whole-tensor
	// layouts: a checkpoint tensor holding a whole parameter (or moment)
	// is then cut to Rank's slice.
	Layouts map[string]parallel.Layout
	Rank    int
	// Pieces, for a network trained with the parallel optimizer, are the
	// boxes of the whole tensors Rank updates and checkpoints (its piece of
	// its slice), by parameter name: a whole tensor (or moment) of such a
	// parameter is cut to that box instead of the layout's slice.
	Pieces map[string]parallel.Box
	// Recut, when non-nil, is called with the name of every tensor that
	// was cut from a whole tensor to Rank's slice (a checkpoint not laid
	// out for this job), so that the caller can say so.
	Recut func(name string)
}

// Restore loads tensors into the model (and optimizer). Every model
// parameter must be present with the same shape and dtype "Float32";
// tensors the model does not know are errors too. All mismatches are
// reported at once.
func Restore(m Parameterized, tensors []ckpt.Tensor, opts RestoreOptions) error {
	byName := make(map[string]ckpt.Tensor, len(tensors))
	for _, t := range tensors {
		byName[t.Name] = t
	}
	var problems []string
	if opts.Layouts != nil {
		slices := map[string][]int{}
		for _, p := range m.Params() {
			slices[p.Name] = p.Shape()
			slices["moments."+p.Name] = p.Shape()
		}
		for name, t := range byName {
			l, ok := layoutOf(opts.Layouts, name)
			if !ok || sameDims(t.Dims, slices[name]) {
				continue
			}
			box, err := l.Box(opts.Rank)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			if b, ok := pieceOf(opts.Pieces, name); ok {
				box = b
			}
			cut, err := wholeToSlice(t, l, box, slices[name])
			switch {
			case errors.Is(err, errNotWhole):
				// Restore reports the shape below.
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			default:
				byName[name] = cut
				if opts.Recut != nil {
					opts.Recut(name)
				}
			}
		}
	}
	used := map[string]bool{}
	load := func(name string, shape []int, dtype string, set func(ckpt.Tensor) error) {
		t, ok := byName[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: missing", name))
			return
		}
		used[name] = true
		if t.DType != dtype {
			problems = append(problems, fmt.Sprintf("%s: dtype %s, the model wants %s", name, t.DType, dtype))
			return
		}
		if !sameDims(t.Dims, shape) {
			problems = append(problems, fmt.Sprintf("%s: shape %v, the model wants %v", name, t.Dims, shape))
			return
		}
		if err := set(t); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
		}
	}
	for _, p := range m.Params() {
		dst := p.Value.Data()
		load(p.Name, p.Shape(), nn.DType, func(t ckpt.Tensor) error { return copyFloats(dst, t) })
	}
	var state []optim.StateTensor
	if opts.Optimizer != nil {
		state = opts.Optimizer.State()
	}
	hasState := false
	for _, s := range state {
		if _, ok := byName[s.Name]; ok {
			hasState = true
		}
	}
	if opts.RequireOptimizer && !hasState {
		problems = append(problems, "optimizer state: missing (the checkpoint holds weights only)")
	}
	if hasState {
		for _, s := range state {
			s := s
			if opts.OwnHyperparameters && (s.Name == "learning_rate" || s.Name == "momentum") {
				continue
			}
			switch {
			case s.F32 != nil:
				load(s.Name, s.Shape, ckpt.DTypeFloat32, func(t ckpt.Tensor) error { return copyFloats(s.F32, t) })
			case s.I32 != nil:
				load(s.Name, s.Shape, ckpt.DTypeInt32, func(t ckpt.Tensor) error {
					if len(t.Data) != 4*len(s.I32) {
						return fmt.Errorf("%d bytes, want %d", len(t.Data), 4*len(s.I32))
					}
					for i := range s.I32 {
						s.I32[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
					}
					return nil
				})
			}
		}
	}
	var unknown []string
	for name := range byName {
		if !used[name] && !isOptimizerName(name, state) {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, n := range unknown {
		problems = append(problems, fmt.Sprintf("%s: not a parameter of %s", n, m.Name()))
	}
	if len(problems) > 0 {
		const most = 12
		more := ""
		if len(problems) > most {
			more = fmt.Sprintf("; and %d more", len(problems)-most)
			problems = problems[:most]
		}
		return fmt.Errorf("%w %s: %s%s", ErrMismatch, m.Name(), strings.Join(problems, "; "), more)
	}
	return nil
}

// isOptimizerName reports whether name is optimizer state a caller chose
// not to restore (loading weights only is allowed).
func isOptimizerName(name string, state []optim.StateTensor) bool {
	if strings.HasPrefix(name, "moments.") {
		return true
	}
	switch name {
	case "global_step", "learning_rate", "momentum":
		return true
	}
	for _, s := range state {
		if s.Name == name {
			return true
		}
	}
	return false
}

func sameDims(d []int64, shape []int) bool {
	if len(d) != len(shape) {
		// MindSpore r1.x stores a scalar with dims [0]; a [1] state tensor
		// is still what it says.
		return false
	}
	for i := range d {
		if d[i] != int64(shape[i]) {
			return false
		}
	}
	return true
}

func copyFloats(dst []float32, t ckpt.Tensor) error {
	src, err := t.Float32s()
	if err != nil {
		return err
	}
	if len(src) != len(dst) {
		return fmt.Errorf("%d values, want %d", len(src), len(dst))
	}
	for i, v := range src {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("value %d is %v", i, v)
		}
	}
	copy(dst, src)
	return nil
}
