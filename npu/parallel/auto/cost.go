package auto

import (
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/parallel"
)

// OpCost is the predicted cost of one operator on one rank per training
// step.
type OpCost struct {
	Op       string
	Kind     parallel.OpKind
	Strategy [][]int
	// Used is the number of devices the strategy splits over; the others
	// repeat the calculation.
	Used int
	// ComputeSeconds is the forward and backward pass on one rank: its
	// FLOPs over the device's FLOP/s or its memory traffic over the
	// memory bandwidth, whichever is longer, plus the optimizer's update
	// of the parameters this operator is the first to use and the
	// packing of their gradients for reduction (memory traffic).
	ComputeSeconds float64
	// CommSeconds covers the AllReduce of a partial output, the
	// reductions of partial gradients (of the input and of the parameters
	// this operator is the first to use) and the redistribution of its
	// input from the previous operator's output, forward and backward.
	CommSeconds float64
	// CommBytes is what one rank moves for that: ring traffic
	// (2(g−1)/g·bytes per AllReduce) plus the most any rank receives in
	// a redistribution.
	CommBytes int64
	// IntraBytes and InterBytes split CommBytes by link: within a server
	// and between servers (a redistribution counts, per link, the most
	// any rank receives over it).
	IntraBytes, InterBytes int64
	// Collectives is the number of collective calls (each costs a
	// latency).
	Collectives int
	// ParamMemory is value, gradient and momentum (a frozen parameter's
	// value only) of the slices of the parameters this operator is the
	// first to use, with their reduction buffers; ActivationMemory its
	// output slice kept for the backward pass, plus the input batch slice
	// it reads (the first operator's input, labels). Memory is their sum.
	ParamMemory, ActivationMemory, Memory int64
	// Largest names the biggest tensor counted in Memory, with its bytes
	// (of the operator priced alone).
	Largest      string
	LargestBytes int64
	// scatterRooms is the receive buffers the reduce-scatters of this
	// operator's gradients need, counted in ParamMemory, and scatterRoom
	// the largest of them: npu/shard has one buffer for all, the largest
	// of the step's, which [pricer.plan] keeps.
	scatterRooms, scatterRoom int64
	// buckets are the gradient reductions counted in CommSeconds, each
	// with a latency; the engine makes one call a step per group, which
	// [pricer.plan] keeps.
	buckets []bucketCall
}

// bucketCall is one call reducing parameter gradients over groups of the
// same size and reach.
type bucketCall struct {
	kind   Collective
	size   int
	across bool
}

// Memory traffic of the step's loops besides the products, in bytes per
// parameter element.
const (
	// UpdateBytesPerElement is what npu/optim's Momentum reads and writes
	// per element: parameter, gradient and moment read, parameter and
	// moment written.
	UpdateBytesPerElement = 5 * BytesPerElement
	// PackBytesPerElement is what npu/shard moves per element of a
	// gradient it reduces: copied into the reduction buffer and back
	// (read and write each), and divided by the group size in place
	// (gradients_mean).
	PackBytesPerElement = 6 * BytesPerElement
)

// Plan is a strategy for every operator of a graph with its predicted
// cost per training step.
type Plan struct {
	Model   string
	Devices int
	Machine Machine
	// Strategy names every operator, including those that run data
	// parallel.
	Strategy parallel.Strategy
	Ops      []OpCost
	// StepSeconds = ComputeSeconds + CommSeconds: the model does not
	// overlap communication with computation.
	StepSeconds, ComputeSeconds, CommSeconds float64
	// IntraBytes and InterBytes are what one rank moves in a step within
	// its server and between servers (the operators' sums).
	IntraBytes, InterBytes int64
	// PeakMemory is the most memory one rank holds: every operator's
	// Memory, all alive at the end of the forward pass.
	PeakMemory int64
	// Candidates is the number of operator strategies the search priced
	// (0 for Evaluate).
	Candidates int
}

// Fits reports whether the plan's peak memory is within a device's memory.
func (p *Plan) Fits() bool { return p.PeakMemory <= p.Machine.Memory }

// Evaluate prices strategy s for graph g on devices devices of machine m;
// operators s does not name run data parallel, so an empty strategy is
// pure data parallel. The plan is returned even when it does not fit the
// device memory (see [Plan.Fits]).
func Evaluate(g parallel.Graph, s parallel.Strategy, devices int, m Machine, opts ...Option) (*Plan, error) {
	p, err := newPricer(g, devices, m)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(p)
	}
	ols, err := g.Shard(s, devices)
	if err != nil {
		return nil, fmt.Errorf("price %s on %d devices: %w", g.Model, devices, err)
	}
	return p.plan(ols)
}

// pricer prices operators of one graph on one machine. A parameter used
// by several operators is charged (memory, gradient reduction) to the
// first of them only.
type pricer struct {
	// optShard is the parallel optimizer's shard size: -1 when it is
	// off, 0 for each parameter's whole data-parallel group.
	optShard  int
	g         parallel.Graph
	devices   int
	m         Machine
	firstUser map[string]int
	groups    map[string]group
	// Caches for the search, which prices the same layouts and pairs of
	// layouts many times: cuts by layout, redistributions by pair of cuts,
	// and the groups of linked dimensions [loads] enumerates.
	cuts      map[*parallel.Layout]cuts
	cutIDs    map[string]int // a number per distinct cuts, for transfers' keys
	transfers map[[2]int]directed
	groupMemo map[string][]pair
}

// directed is the cost of one redistribution in one direction.
type directed struct {
	seconds             float64
	bytes, intra, inter int64
}

type group struct {
	size   int
	across bool // the group's ranks span servers
}

func newPricer(g parallel.Graph, devices int, m Machine) (*pricer, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if devices < 1 {
		return nil, fmt.Errorf("%w: %d devices, want at least 1", ErrGraph, devices)
	}
	if len(g.Ops) == 0 {
		return nil, fmt.Errorf("%w: %s has no operators", ErrGraph, g.Model)
	}
	p := &pricer{optShard: -1, g: g, devices: devices, m: m, firstUser: map[string]int{}, groups: map[string]group{},
		cuts: map[*parallel.Layout]cuts{}, cutIDs: map[string]int{}, transfers: map[[2]int]directed{}, groupMemo: map[string][]pair{}}
	for i, o := range g.Ops {
		if len(o.Inputs) == 0 {
			return nil, fmt.Errorf("%w: operator %s has no inputs", ErrGraph, o.Name)
		}
		if i > 0 {
			prev := g.Ops[i-1]
			if !slices.Equal(prev.Output.Shape, o.Inputs[0].Shape) {
				return nil, fmt.Errorf("%w: operator %s's output %v does not match the input %v of %s, which follows it", ErrGraph, prev.Name, prev.Output.Shape, o.Inputs[0].Shape, o.Name)
			}
		}
		for _, t := range o.Params() {
			if _, ok := p.firstUser[t.Name]; !ok {
				p.firstUser[t.Name] = i
			}
		}
	}
	return p, nil
}

// group returns the size of the groups that reduce over axes of l's device
// matrix, and whether any of them spans servers.
func (p *pricer) group(l parallel.Layout, axes []int) (group, error) {
	if len(axes) == 0 {
		return group{size: 1}, nil
	}
	key := fmt.Sprint(l.DeviceMatrix, axes)
	if g, ok := p.groups[key]; ok {
		return g, nil
	}
	g := group{size: 1}
	for _, a := range axes {
		g.size *= l.DeviceMatrix[a]
	}
	across, err := acrossServers(l.DeviceMatrix, axes, p.m.DevicesPerServer)
	if err != nil {
		return group{}, err
	}
	g.across = across
	p.groups[key] = g
	return g, nil
}

// Option changes how a plan is priced.
type Option func(*pricer)

// ParallelOptimizer prices the parallel optimizer (MindSpore's
// enable_parallel_optimizer) with optimizer_weight_shard_size size (0:
// each parameter's whole data-parallel group): a trainable parameter
// repeated on several ranks keeps only its piece of the momentum on each,
// when its slice's dimension 0 divides into the pieces, as npu/shard runs
// it (parallel.OptimizerPieces). A layout npu/shard refuses (a shard size
// that does not divide a parameter's repeats) is an error for Evaluate
// and no candidate for Search.
func ParallelOptimizer(size int) Option {
	return func(p *pricer) { p.optShard = max(size, 0) }
}

// optPieces returns how many pieces the parallel optimizer splits the
// update of parameter t, laid out by l, into: 1 when it is off or leaves
// the parameter whole, by the rule npu/shard runs
// (parallel.OptimizerPieces).
func (p *pricer) optPieces(t parallel.TensorSpec, l parallel.Layout) (int, error) {
	if p.optShard < 0 {
		return 1, nil
	}
	shape, err := l.SliceShape()
	if err != nil {
		return 0, err
	}
	repeats, err := l.Repeats()
	if err != nil {
		return 0, err
	}
	return parallel.OptimizerPieces(t, shape, repeats, p.optShard)
}

// groupSize returns the number of ranks of a reduction over axes of l's
// device matrix.
func groupSize(l parallel.Layout, axes []int) int {
	n := 1
	for _, a := range axes {
		n *= l.DeviceMatrix[a]
	}
	return n
}

func sliceBytes(l parallel.Layout) (int64, error) {
	shape, err := l.SliceShape()
	if err != nil {
		return 0, err
	}
	return elements(shape) * BytesPerElement, nil
}

// op prices operator i laid out as ol, except the redistribution of its
// input (which depends on the previous operator).
func (p *pricer) op(i int, ol *parallel.OpLayout) (OpCost, error) {
	o := p.g.Ops[i]
	c := OpCost{Op: o.Name, Kind: o.Kind, Strategy: ol.Strategy, Used: ol.Used}
	// The backward pass computes the input gradient and, for an operator
	// with parameters, the parameter gradients too: one or two products
	// the size of the forward one.
	// Each pass takes the longer of its FLOPs and its memory traffic:
	// it reads the operator's input and parameter slices and writes an
	// output's worth. The input gradient of a MatMul reads the weight
	// transposed, which the product kernel packs at its own rate, and its
	// weight gradient writes a weight-sized result at another.
	out, err := sliceBytes(ol.Output)
	if err != nil {
		return OpCost{}, err
	}
	var data, params int64
	for k, l := range ol.Inputs {
		b, err := sliceBytes(l)
		if err != nil {
			return OpCost{}, err
		}
		if o.Inputs[k].Name != "" {
			params += b
		} else {
			data += b
		}
	}
	for _, l := range ol.Extra {
		b, err := sliceBytes(l)
		if err != nil {
			return OpCost{}, err
		}
		params += b
	}
	pass := float64(o.FLOPs) / float64(ol.Used) / p.m.FLOPS
	stream := p.m.StreamSeconds(data + params + out)
	inputGrad, weightGrad := stream, stream
	if o.Kind == parallel.OpMatMul && p.m.TransposedBandwidth > 0 {
		inputGrad = p.m.StreamSeconds(data+out) + float64(params)/p.m.TransposedBandwidth
	}
	if o.Kind == parallel.OpMatMul && p.m.WeightGradBandwidth > 0 {
		weightGrad = p.m.StreamSeconds(data+out) + float64(params)/p.m.WeightGradBandwidth
	}
	c.ComputeSeconds = max(pass, stream) + max(pass, inputGrad)
	if len(o.Params()) > 0 {
		c.ComputeSeconds += max(pass, weightGrad)
	}

	// A partial output or input gradient is reduced by GroupAllReduce; a
	// gradient bucket (bucket) by the communicator's own AllReduce when
	// its group is every rank.
	allReduce := func(bucket bool, l parallel.Layout, axes []int, bytes int64) error {
		g, err := p.group(l, axes)
		if err != nil || g.size <= 1 || bytes == 0 {
			return err
		}
		kind := GroupAllReduce
		if bucket && g.size == p.devices {
			kind = WholeAllReduce
		}
		if bucket {
			c.buckets = append(c.buckets, bucketCall{kind, g.size, g.across})
		}
		c.CommSeconds += p.m.AllReduceSeconds(kind, bytes, g.size, g.across)
		ring := 2 * int64(g.size-1) * bytes / int64(g.size)
		c.CommBytes += ring
		if g.across {
			c.InterBytes += ring
		} else {
			c.IntraBytes += ring
		}
		c.Collectives++
		return nil
	}
	// The loader gives each rank its share of the batch's rows; a layout
	// that needs more rows of loader data (the images, the labels) than
	// that, on each rank, gets the rest from the others in one Exchange.
	gather := func(l parallel.Layout, bytes int64) error {
		shape, err := l.SliceShape()
		if err != nil || len(shape) == 0 || len(l.Shape) == 0 || l.Shape[0]%p.devices != 0 || shape[0] == 0 {
			return err
		}
		held := l.Shape[0] / p.devices
		if shape[0] <= held {
			return nil
		}
		recv := bytes / int64(shape[0]) * int64(shape[0]-held)
		across := p.devices > p.m.DevicesPerServer
		c.CommSeconds += p.m.ExchangeSeconds(recv, across)
		c.CommBytes += recv
		if across {
			c.InterBytes += recv
		} else {
			c.IntraBytes += recv
		}
		c.Collectives++
		return nil
	}
	keep := func(name string, bytes int64) {
		if bytes > c.LargestBytes {
			c.Largest, c.LargestBytes = name, bytes
		}
	}
	if err := allReduce(false, ol.Output, ol.OutputPartial, out); err != nil {
		return OpCost{}, err
	}
	c.ActivationMemory += out
	keep(o.Name+" output", out)

	// Gradients of parameters over the same group are reduced in one
	// fused call, as the trainer reduces one flat buffer.
	fused := map[string]int64{}
	var fusedOrder []string
	fusedLayout := map[string]parallel.Layout{}
	fusedAxes := map[string][]int{}
	param := func(t parallel.TensorSpec, l parallel.Layout, axes []int) error {
		if p.firstUser[t.Name] != i {
			return nil
		}
		bytes, err := sliceBytes(l)
		if err != nil {
			return err
		}
		pieces, err := p.optPieces(t, l)
		if err != nil {
			return err
		}
		// The value; a trainable parameter also has a gradient and a
		// moment (this rank's piece of it). A frozen one (BatchNorm's
		// moving statistics) has neither, as on npu/shard's device.
		trainable := !t.Frozen
		held := bytes
		if trainable {
			held += bytes + bytes/int64(pieces)
		}
		if len(axes) > 0 {
			// npu/shard packs the gradients it all-reduces into a buffer of
			// their own; one reduce-scattered over the ranks that split
			// its update needs room for the others' parts of its piece.
			if g := groupSize(l, axes); pieces > 1 && g == pieces {
				room := bytes / int64(pieces) * int64(pieces-1)
				held += room
				c.scatterRooms += room
				c.scatterRoom = max(c.scatterRoom, room)
			} else {
				held += bytes
			}
		}
		c.ParamMemory += held
		keep("parameter "+t.Name, held)
		// The optimizer updates this rank's piece of a trainable
		// parameter; a reduced gradient (or a frozen parameter's value,
		// averaged) is packed into its bucket and back.
		var update int64
		if trainable {
			update = bytes / BytesPerElement / int64(pieces) * UpdateBytesPerElement
		}
		if groupSize(l, axes) > 1 {
			update += bytes / BytesPerElement * PackBytesPerElement
		}
		c.ComputeSeconds += p.m.StreamSeconds(update)
		key := fmt.Sprint(axes)
		if _, ok := fused[key]; !ok {
			fusedOrder = append(fusedOrder, key)
			fusedLayout[key], fusedAxes[key] = l, axes
		}
		fused[key] += bytes
		return nil
	}
	for k, t := range o.Inputs {
		l := ol.Inputs[k]
		switch {
		case t.Name != "":
			if err := param(t, l, ol.GradPartial[k]); err != nil {
				return OpCost{}, err
			}
		case k == 0 && i > 0:
			// The activation gradient flows back to the previous operator.
			bytes, err := sliceBytes(l)
			if err != nil {
				return OpCost{}, err
			}
			if err := allReduce(false, l, ol.GradPartial[k], bytes); err != nil {
				return OpCost{}, err
			}
		default:
			// Data the loader supplies: the batch, labels.
			bytes, err := sliceBytes(l)
			if err != nil {
				return OpCost{}, err
			}
			c.ActivationMemory += bytes
			keep(o.Name+" input batch", bytes)
			if err := gather(l, bytes); err != nil {
				return OpCost{}, err
			}
		}
	}
	if o.Kind == parallel.OpLoss && len(ol.Inputs) == 1 {
		// The labels of the loss's rows, when the graph leaves them out
		// of its inputs (npu/shard's): one float32 a row.
		shape, err := ol.Inputs[0].SliceShape()
		if err != nil {
			return OpCost{}, err
		}
		if len(shape) > 0 {
			if err := gather(ol.Inputs[0], int64(shape[0])*BytesPerElement); err != nil {
				return OpCost{}, err
			}
		}
	}
	for k, t := range o.Extra {
		if err := param(t, ol.Extra[k], ol.ExtraGradPartial[k]); err != nil {
			return OpCost{}, err
		}
	}
	for _, key := range fusedOrder {
		if err := allReduce(true, fusedLayout[key], fusedAxes[key], fused[key]); err != nil {
			return OpCost{}, err
		}
	}
	c.Memory = c.ParamMemory + c.ActivationMemory
	return c, nil
}

// redistribution is the cost of moving prev's output into next's first
// input layout in the forward pass and the gradient back in the backward
// pass.
type redistribution struct {
	seconds             float64
	bytes, intra, inter int64
	collectives         int
}

func (p *pricer) redistribute(prev, next *parallel.OpLayout) (redistribution, error) {
	if !slices.Equal(prev.Output.Shape, next.Inputs[0].Shape) {
		return redistribution{}, fmt.Errorf("%w: %s's output %v does not match %s's input %v", ErrGraph, prev.Op, prev.Output.Shape, next.Op, next.Inputs[0].Shape)
	}
	out, err := p.cutsOf(&prev.Output)
	if err != nil {
		return redistribution{}, fmt.Errorf("%s output: %w", prev.Op, err)
	}
	in, err := p.cutsOf(&next.Inputs[0])
	if err != nil {
		return redistribution{}, fmt.Errorf("%s input: %w", next.Op, err)
	}
	var r redistribution
	for _, dir := range [2][2]cuts{{out, in}, {in, out}} {
		key := [2]int{dir[0].id, dir[1].id}
		d, ok := p.transfers[key]
		if !ok {
			d.seconds, d.bytes, d.intra, d.inter = p.m.cost(loads(dir[0], dir[1], p.m.DevicesPerServer, p.groupMemo))
			p.transfers[key] = d
		}
		if d.seconds > 0 {
			r.seconds += d.seconds
			r.bytes += d.bytes
			r.intra += d.intra
			r.inter += d.inter
			r.collectives++
		}
	}
	return r, nil
}

// cutsOf returns the cuts of a layout the search holds (by address: the
// candidates' layouts live as long as the search).
func (p *pricer) cutsOf(l *parallel.Layout) (cuts, error) {
	if c, ok := p.cuts[l]; ok {
		return c, nil
	}
	c, err := cutsOf(*l)
	if err != nil {
		return cuts{}, err
	}
	id, ok := p.cutIDs[c.key]
	if !ok {
		id = len(p.cutIDs)
		p.cutIDs[c.key] = id
	}
	c.id = id
	p.cuts[l] = c
	return c, nil
}

// plan prices a whole layout of the graph.
func (p *pricer) plan(ols []*parallel.OpLayout) (*Plan, error) {
	plan := &Plan{Model: p.g.Model, Devices: p.devices, Machine: p.m, Strategy: parallel.Strategy{}}
	reduced := map[bucketCall]bool{}
	for i, ol := range ols {
		c, err := p.op(i, ol)
		if err != nil {
			return nil, fmt.Errorf("price operator %s: %w", ol.Op, err)
		}
		// The engine packs the gradients reduced over one partition of
		// the ranks into one bucket and reduces it once a step: later
		// operators' reductions over groups like an earlier one's add
		// their bytes but no latency. (The search prices each operator
		// alone, a latency each.)
		for _, b := range c.buckets {
			if reduced[b] {
				c.CommSeconds -= p.m.link(b.kind, b.across).Latency.Seconds()
				c.Collectives--
			}
			reduced[b] = true
		}
		if i > 0 {
			r, err := p.redistribute(ols[i-1], ol)
			if err != nil {
				return nil, fmt.Errorf("price operator %s: %w", ol.Op, err)
			}
			c.CommSeconds += r.seconds
			c.CommBytes += r.bytes
			c.IntraBytes += r.intra
			c.InterBytes += r.inter
			c.Collectives += r.collectives
		}
		plan.Strategy[ol.Op] = ol.Strategy
		plan.Ops = append(plan.Ops, c)
		plan.ComputeSeconds += c.ComputeSeconds
		plan.CommSeconds += c.CommSeconds
		plan.IntraBytes += c.IntraBytes
		plan.InterBytes += c.InterBytes
	}
	// npu/shard receives every reduce-scatter into one buffer, sized for
	// the largest: the operator that needs it keeps that room, every other
	// room is given back. (The search, pricing operators alone, counts each
	// room: it errs on the safe side.)
	widest := 0
	for i, c := range plan.Ops {
		if c.scatterRoom > plan.Ops[widest].scatterRoom {
			widest = i
		}
	}
	for i := range plan.Ops {
		c := &plan.Ops[i]
		shared := c.scatterRooms
		if i == widest {
			shared -= c.scatterRoom
		}
		c.ParamMemory -= shared
		c.Memory -= shared
		plan.PeakMemory += c.Memory
	}
	plan.StepSeconds = plan.ComputeSeconds + plan.CommSeconds
	return plan, nil
}
