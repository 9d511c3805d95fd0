package parallel

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// OpKind is an operator type, named as MindSpore's ops name it.
type OpKind string

// The operators a sharded network is made of.
const (
	OpMatMul    OpKind = "MatMul"    // x[n,k]·w[k,m], or w[m,k] transposed (nn.Dense)
	OpBiasAdd   OpKind = "BiasAdd"   // x[n,m] + b[m]
	OpReLU      OpKind = "ReLU"      // elementwise
	OpConv2D    OpKind = "Conv2D"    // x[n,c,h,w] ⊛ w[o,c,i,j] (+ bias[o])
	OpBatchNorm OpKind = "BatchNorm" // per channel of x[n,c,h,w]
	OpMaxPool   OpKind = "MaxPool"   // per channel
	OpAvgPool   OpKind = "AvgPool"   // global average per channel
	OpFlatten   OpKind = "Flatten"   // [n,c,h,w] → [n,c·h·w]
	OpReduceSum OpKind = "ReduceSum" // sum over the last dimension
	// OpLoss is the seeds' SoftmaxCrossEntropyExpand: the mean over the
	// batch of the cross entropy of softmax(logits).
	OpLoss OpKind = "SoftmaxCrossEntropyExpand"
	// OpAllReduce is an explicit AllReduce(sum) a hybrid_parallel model
	// places itself, as the seeds' HybridParallelNet does.
	OpAllReduce OpKind = "AllReduce"
	// OpBlock is a sub-network run as a whole (a ResNet residual block):
	// only its batch dimension can be split, its parameters are
	// replicated.
	OpBlock OpKind = "Block"
)

// TensorSpec is one tensor an operator reads or writes. Labels has one
// letter per dimension; dimensions with the same letter in the tensors of
// one operator are indexed together (MatMul: x "nk", w "km", y "nm"), so
// they must be split the same number of ways. Sizes may differ between
// tensors sharing a letter (Flatten's c is C in its input and C·H·W in its
// output): a split always divides each tensor's own dimension.
type TensorSpec struct {
	Name   string // a parameter's checkpoint name; "" for activations
	Shape  []int
	Labels string
	// Frozen marks a parameter no optimizer updates (MindSpore's
	// requires_grad=False: BatchNorm's moving statistics); the parallel
	// optimizer leaves it whole.
	Frozen bool
}

// OpSpec describes one operator of a network for sharding: its inputs in
// MindSpore's order (activations first, then parameters; a strategy has
// one entry per input), its output, and parameters a strategy does not
// name (a convolution's bias, BatchNorm's gamma and statistics), which
// follow the labels they carry.
type OpSpec struct {
	Name   string // e.g. "fc.matmul", the name a strategy uses
	Kind   OpKind
	Inputs []TensorSpec
	Output TensorSpec
	Extra  []TensorSpec
	// Splittable lists the labels a strategy may split; others must be 1.
	Splittable string
	// Spatial lists labels a strategy may split too, at the price of
	// exchanging a halo between neighbouring slices (a window that reads
	// across the cut: a convolution's or a pooling's H and W). The
	// strategy search does not try them: its cost model has no halo term.
	Spatial string
	// FLOPs is the forward cost of the whole operator (on one device).
	FLOPs int64
}

// Params returns the operator's parameters: inputs with a name, then Extra.
func (o OpSpec) Params() []TensorSpec {
	var out []TensorSpec
	for _, t := range o.Inputs {
		if t.Name != "" {
			out = append(out, t)
		}
	}
	return append(out, o.Extra...)
}

// OpLayout is how one operator runs on a job's devices under a strategy.
// All layouts share DeviceMatrix; axes are indices into it (0 = leftmost).
type OpLayout struct {
	Op           string
	Strategy     [][]int
	DeviceMatrix []int
	Inputs       []Layout
	Output       Layout
	Extra        []Layout
	// OutputPartial lists the axes over which each rank's output is a
	// partial sum (a split contraction dimension): summing over them gives
	// the output.
	OutputPartial []int
	// GradPartial lists, per input, the axes over which that input's
	// gradient is partial (split dimensions the input does not have);
	// ExtraGradPartial the same per Extra tensor.
	GradPartial, ExtraGradPartial [][]int
	// Used is the number of devices the strategy splits over; the rest
	// repeat the calculation along a leading axis (RepeatAxis, or -1).
	Used, RepeatAxis int
}

// DataParallelStrategy returns the strategy that splits the operator's
// first input along its first dimension over all devices (when that
// dimension may be split and divides evenly), and nothing else: what
// MindSpore gives operators a semi_auto_parallel network leaves unset.
func (o OpSpec) DataParallelStrategy(devices int) [][]int {
	out := make([][]int, len(o.Inputs))
	for i, t := range o.Inputs {
		out[i] = make([]int, len(t.Shape))
		for k := range out[i] {
			out[i][k] = 1
		}
	}
	if len(o.Inputs) == 0 || len(o.Inputs[0].Shape) == 0 {
		return out
	}
	batch := o.Inputs[0].Labels[0]
	if !strings.ContainsRune(o.Splittable, rune(batch)) || o.Inputs[0].Shape[0]%devices != 0 {
		return out
	}
	for i, t := range o.Inputs {
		for k := range t.Labels {
			if t.Labels[k] == batch {
				out[i][k] = devices
			}
		}
	}
	return out
}

// Shard lays the operator out on devices devices under strategy (one list
// per input, one entry per input dimension). It refuses strategies that
// split a dimension two ways in two inputs, split a label the operator
// cannot split, use a number of devices that does not divide the job's, or
// split a dimension that is not divisible.
func (o OpSpec) Shard(strategy [][]int, devices int) (*OpLayout, error) {
	fail := func(format string, args ...any) (*OpLayout, error) {
		return nil, fmt.Errorf("%w: operator %s (%s): %s", ErrStrategy, o.Name, o.Kind, fmt.Sprintf(format, args...))
	}
	if len(strategy) != len(o.Inputs) {
		return fail("the strategy has %d entries, the operator has %d inputs", len(strategy), len(o.Inputs))
	}
	split := map[byte]int{}
	var order []byte // labels in order of first appearance
	for i, t := range o.Inputs {
		if len(strategy[i]) != len(t.Shape) {
			return fail("input %d has %d dimensions %v, the strategy %v has %d entries", i, len(t.Shape), t.Shape, strategy[i], len(strategy[i]))
		}
		for k, s := range strategy[i] {
			label := t.Labels[k]
			if s < 1 {
				return fail("input %d dimension %d is split %d ways, want at least 1", i, k, s)
			}
			if prev, ok := split[label]; ok {
				if prev != s {
					return fail("input %d dimension %d is split %d ways, but another input splits the same dimension %d ways", i, k, s, prev)
				}
				continue
			}
			if s > 1 && !o.CanSplit(label) {
				return fail("input %d dimension %d cannot be split (only %s)", i, k, o.splittableDims())
			}
			split[label] = s
			order = append(order, label)
		}
	}
	used, err := shardProduct(labelSplits(order, split))
	if err != nil {
		return fail("%v", err)
	}
	if devices < 1 || devices%used != 0 {
		return fail("the strategy uses %d devices, which does not divide the job's %d", used, devices)
	}
	ol := &OpLayout{Op: o.Name, Strategy: cloneStrategy(strategy), Used: used, RepeatAxis: -1}
	axisOf := map[byte]int{}
	if repeat := devices / used; repeat > 1 {
		ol.DeviceMatrix = append(ol.DeviceMatrix, repeat)
		ol.RepeatAxis = 0
	}
	for _, label := range order {
		axisOf[label] = len(ol.DeviceMatrix)
		ol.DeviceMatrix = append(ol.DeviceMatrix, split[label])
	}
	if len(ol.DeviceMatrix) == 0 {
		ol.DeviceMatrix = []int{devices}
		ol.RepeatAxis = 0
	}
	layout := func(t TensorSpec) (Layout, error) {
		if len(t.Labels) != len(t.Shape) {
			return Layout{}, fmt.Errorf("%w: operator %s: tensor %s has %d labels %q for shape %v", ErrStrategy, o.Name, t.Name, len(t.Labels), t.Labels, t.Shape)
		}
		l := Layout{DeviceMatrix: slices.Clone(ol.DeviceMatrix), Shape: slices.Clone(t.Shape), TensorMap: make([]int, len(t.Shape))}
		for k := range t.Labels {
			l.TensorMap[k] = -1
			if a, ok := axisOf[t.Labels[k]]; ok && split[t.Labels[k]] > 1 {
				l.TensorMap[k] = len(l.DeviceMatrix) - 1 - a
			}
		}
		if err := l.Validate(); err != nil {
			return Layout{}, fmt.Errorf("operator %s tensor %s: %w", o.Name, tensorName(t), err)
		}
		return l, nil
	}
	// partial lists the split axes whose labels t does not have.
	partial := func(t TensorSpec) []int {
		var axes []int
		for _, label := range order {
			if split[label] > 1 && !strings.ContainsRune(t.Labels, rune(label)) {
				axes = append(axes, axisOf[label])
			}
		}
		return axes
	}
	for _, t := range o.Inputs {
		l, err := layout(t)
		if err != nil {
			return nil, err
		}
		ol.Inputs = append(ol.Inputs, l)
		ol.GradPartial = append(ol.GradPartial, partial(t))
	}
	for _, t := range o.Extra {
		l, err := layout(t)
		if err != nil {
			return nil, err
		}
		ol.Extra = append(ol.Extra, l)
		ol.ExtraGradPartial = append(ol.ExtraGradPartial, partial(t))
	}
	if ol.Output, err = layout(o.Output); err != nil {
		return nil, err
	}
	ol.OutputPartial = partial(o.Output)
	return ol, nil
}

// CanSplit reports whether a strategy may split the dimensions labelled
// label: Splittable or Spatial.
func (o OpSpec) CanSplit(label byte) bool {
	return strings.IndexByte(o.Splittable, label) >= 0 || strings.IndexByte(o.Spatial, label) >= 0
}

func (o OpSpec) splittableDims() string {
	if o.Splittable == "" && o.Spatial == "" {
		return "none can"
	}
	var dims []string
	for _, t := range o.Inputs {
		for k := range t.Labels {
			if o.CanSplit(t.Labels[k]) {
				dims = append(dims, fmt.Sprintf("%s dimension %d", tensorName(t), k))
			}
		}
	}
	return strings.Join(dims, ", ")
}

func tensorName(t TensorSpec) string {
	if t.Name == "" {
		return "input"
	}
	return t.Name
}

func labelSplits(order []byte, split map[byte]int) []int {
	out := make([]int, len(order))
	for i, label := range order {
		out[i] = split[label]
	}
	return out
}

func cloneStrategy(s [][]int) [][]int {
	out := make([][]int, len(s))
	for i := range s {
		out[i] = slices.Clone(s[i])
	}
	return out
}

// Group returns the ranks that hold what rank holds except along axes:
// the ranks a partial sum over those axes is reduced among, in rank order.
func (l Layout) Group(rank int, axes []int) ([]int, error) {
	coord, err := l.Coordinate(rank)
	if err != nil {
		return nil, err
	}
	for _, a := range axes {
		if a < 0 || a >= len(l.DeviceMatrix) {
			return nil, fmt.Errorf("%w: axis %d of device matrix %v", ErrLayout, a, l.DeviceMatrix)
		}
	}
	var group []int
	for r := 0; r < l.Devices(); r++ {
		c, _ := l.Coordinate(r)
		same := true
		for a := range c {
			if c[a] != coord[a] && !slices.Contains(axes, a) {
				same = false
				break
			}
		}
		if same {
			group = append(group, r)
		}
	}
	return group, nil
}

// Graph is a network as a chain of operators: the output of each feeds
// the first input of the next.
type Graph struct {
	Model string
	Ops   []OpSpec
}

// Op returns the operator named name.
func (g Graph) Op(name string) (OpSpec, bool) {
	for _, o := range g.Ops {
		if o.Name == name {
			return o, true
		}
	}
	return OpSpec{}, false
}

// OpNames returns the names of the operators in order.
func (g Graph) OpNames() []string {
	out := make([]string, len(g.Ops))
	for i, o := range g.Ops {
		out[i] = o.Name
	}
	return out
}

// Shard lays out every operator of the graph under s on devices devices;
// operators s does not name run data parallel. Every problem is returned
// (joined), each naming its operator: unknown operator names (with the
// valid ones), bad strategies, and a parameter two operators lay out
// differently (MindSpore's rule: a parameter used by several operators
// needs one consistent strategy).
func (g Graph) Shard(s Strategy, devices int) ([]*OpLayout, error) {
	var errs []error
	for _, name := range sortedKeys(s) {
		if _, ok := g.Op(name); !ok {
			errs = append(errs, fmt.Errorf("%w: %s has no operator %q (operators: %s)", ErrStrategy, g.Model, name, strings.Join(g.OpNames(), ", ")))
		}
	}
	out := make([]*OpLayout, len(g.Ops))
	params := map[string]Layout{}
	owner := map[string]string{}
	for i, o := range g.Ops {
		st, ok := s[o.Name]
		if !ok {
			st = o.DataParallelStrategy(devices)
		}
		ol, err := o.Shard(st, devices)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[i] = ol
		check := func(t TensorSpec, l Layout) {
			if t.Name == "" {
				return
			}
			if prev, ok := params[t.Name]; ok && !sameSlices(prev, l) {
				errs = append(errs, fmt.Errorf("%w: parameter %s is used by %s and %s with different strategies: one consistent strategy is needed", ErrStrategy, t.Name, owner[t.Name], o.Name))
				return
			}
			params[t.Name], owner[t.Name] = l, o.Name
		}
		for k, t := range o.Inputs {
			check(t, ol.Inputs[k])
		}
		for k, t := range o.Extra {
			check(t, ol.Extra[k])
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// sameSlices reports whether two layouts give every rank the same box.
func sameSlices(a, b Layout) bool {
	if a.Devices() != b.Devices() || !slices.Equal(a.Shape, b.Shape) {
		return false
	}
	for r := 0; r < a.Devices(); r++ {
		ba, ea := a.Box(r)
		bb, eb := b.Box(r)
		if ea != nil || eb != nil || !slices.Equal(ba.Offset, bb.Offset) || !slices.Equal(ba.Shape, bb.Shape) {
			return false
		}
	}
	return true
}

func sortedKeys(s Strategy) []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ParamLayouts returns the layout of every parameter of g laid out as ols
// (from Graph.Shard): what a strategy file's parallel_layout_item holds.
func ParamLayouts(g Graph, ols []*OpLayout) map[string]Layout {
	out := map[string]Layout{}
	for i, o := range g.Ops {
		if i >= len(ols) || ols[i] == nil {
			continue
		}
		for k, t := range o.Inputs {
			if t.Name != "" {
				out[t.Name] = ols[i].Inputs[k]
			}
		}
		for k, t := range o.Extra {
			if t.Name != "" {
				out[t.Name] = ols[i].Extra[k]
			}
		}
	}
	return out
}
