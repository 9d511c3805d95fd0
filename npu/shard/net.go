package shard

import (
	"context"
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// Config is one rank's part of a sharded training job.
type Config struct {
	Model string // one of Models()
	Mode  parallel.Mode
	// Strategy holds the user's shard strategies (semi_auto_parallel, or
	// auto_parallel's searched ones); operators it does not name run data
	// parallel. A hybrid_parallel model declares its own: a Strategy is
	// then an error, as it is in stand_alone and data_parallel.
	Strategy parallel.Strategy
	Devices  int  // ranks in the job
	Rank     int  // this rank
	Comm     Comm // may be nil when Devices is 1
	// BatchPerDevice is the batch each rank receives per step. With
	// FullBatch every rank receives the whole global batch (MindSpore's
	// full_batch), so BatchPerDevice is the global batch; otherwise the
	// global batch is BatchPerDevice·Devices, rank r holding rows
	// r·BatchPerDevice onwards.
	BatchPerDevice int
	FullBatch      bool
	// GradientsMean selects mean gradients (MindSpore's gradients_mean);
	// false gives the sum of the per-device means.
	GradientsMean bool
	Seed          uint64 // initial parameters, as the stand_alone models draw them
	Threads       int    // worker goroutines of the device (0: GOMAXPROCS)
	Memory        int64  // device capacity in bytes (0: unlimited)
	Classes       int    // 0: DefaultClasses
}

// Net is one rank's part of a sharded network.
type Net struct {
	cfg      Config
	def      *modelDef
	dev      *nn.Device
	stages   []*stage
	params   []*nn.Param
	layouts  map[string]parallel.Layout
	main     *pass
	passes   map[int]*pass // by global batch
	loss     crossEntropy
	strategy parallel.Strategy
	hybrid   bool
	all      []int // every rank, for hybrid_parallel's reductions
}

// stage is one operator on this rank.
type stage struct {
	def    opDef
	layer  nn.Layer // nil for the loss and AllReduce
	params []*nn.Param
	// reduce holds, per parameter, how its gradient (trainable) or its
	// value after a training forward (BatchNorm statistics) is combined.
	reduce []paramReduce
	buf    *tensor.Tensor // AllReduce's output
}

// paramReduce combines one parameter over group (sum, or mean).
type paramReduce struct {
	p     *nn.Param
	group []int
	mean  bool
}

// pass is what a step over one global batch size needs: the layouts of
// every operator and the redistributions between them.
type pass struct {
	global  int
	layouts []*parallel.OpLayout
	data    parallel.Layout // the input batch as ranks receive it
	// fwd[i] brings op i's input from the previous layout (the data layout
	// for i = 0); bwd[i] brings op i's output gradient from op i+1's input
	// layout.
	fwd, bwd  []*plan
	labels    *plan // labels from the data layout to the loss's rows
	logits    *plan // Predict: the last output back to the data's rows
	outGroup  [][]int
	gradGroup [][]int
	lossGroup []int
	lossRows  int // rows of the loss's slice on this rank
}

// New builds rank cfg.Rank's part of the network: each operator's layer
// with its slice shapes on the rank's device, starting from the
// stand_alone model's initial values.
func New(cfg Config) (*Net, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Classes == 0 {
		cfg.Classes = DefaultClasses
	}
	global := cfg.BatchPerDevice
	if !cfg.FullBatch {
		global *= cfg.Devices
	}
	def, err := define(cfg.Model, global, cfg.Classes)
	if err != nil {
		return nil, err
	}
	n := &Net{cfg: cfg, def: def, passes: map[int]*pass{}, layouts: map[string]parallel.Layout{}}
	if n.strategy, err = cfg.strategy(def); err != nil {
		return nil, err
	}
	n.hybrid = cfg.Mode == parallel.HybridParallel
	for r := range cfg.Devices {
		n.all = append(n.all, r)
	}
	layouts, err := def.graph().Shard(n.strategy, cfg.Devices)
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", cfg.Model, cfg.Mode, err)
	}
	n.dev = nn.NewDevice(cfg.Threads)
	n.loss.dev = n.dev
	if err := n.build(layouts); err != nil {
		n.dev.Close()
		return nil, fmt.Errorf("%s rank %d: %w", cfg.Model, cfg.Rank, err)
	}
	return n, nil
}

func (c *Config) check() error {
	switch {
	case c.Devices < 1 || c.Rank < 0 || c.Rank >= c.Devices:
		return fmt.Errorf("%w: rank %d of %d devices", ErrConfig, c.Rank, c.Devices)
	case c.Devices > 1 && c.Comm == nil:
		return fmt.Errorf("%w: %d devices need a communicator", ErrConfig, c.Devices)
	case c.Comm != nil && (c.Comm.Size() != c.Devices || c.Comm.Rank() != c.Rank):
		return fmt.Errorf("%w: communicator of rank %d of %d for rank %d of %d", ErrConfig, c.Comm.Rank(), c.Comm.Size(), c.Rank, c.Devices)
	case c.BatchPerDevice < 1:
		return fmt.Errorf("%w: batch per device %d, want at least 1", ErrConfig, c.BatchPerDevice)
	case c.Memory < 0:
		return fmt.Errorf("%w: device memory %d bytes", ErrConfig, c.Memory)
	case c.Classes < 0:
		return fmt.Errorf("%w: %d classes", ErrConfig, c.Classes)
	case c.Mode == parallel.StandAlone && c.Devices != 1:
		return fmt.Errorf("%w: stand_alone runs on 1 device, not %d", ErrConfig, c.Devices)
	}
	return nil
}

// strategy returns the strategy the mode runs def with.
func (c *Config) strategy(def *modelDef) (parallel.Strategy, error) {
	hasAllReduce := slices.ContainsFunc(def.ops, func(o opDef) bool { return o.spec.Kind == parallel.OpAllReduce })
	switch c.Mode {
	case parallel.HybridParallel:
		if len(c.Strategy) > 0 {
			return nil, fmt.Errorf("%w: hybrid_parallel: %s declares its own split, a strategy cannot be given", ErrConfig, def.name)
		}
		if def.declared == nil {
			return parallel.Strategy{}, nil
		}
		return def.declared(c.Devices), nil
	case parallel.SemiAutoParallel, parallel.AutoParallel:
		if def.declared != nil || hasAllReduce {
			return nil, fmt.Errorf("%w: %s splits itself with layerwise_parallel parameters and an explicit AllReduce: it runs in hybrid_parallel mode, not %s", ErrConfig, def.name, c.Mode)
		}
		return c.Strategy, nil
	case parallel.StandAlone, parallel.DataParallel:
		if len(c.Strategy) > 0 {
			return nil, fmt.Errorf("%w: %s takes no shard strategy", ErrConfig, c.Mode)
		}
		if def.declared != nil || hasAllReduce {
			return nil, fmt.Errorf("%w: %s runs in hybrid_parallel mode, not %s", ErrConfig, def.name, c.Mode)
		}
		return parallel.Strategy{}, nil
	}
	return nil, fmt.Errorf("%w: mode %v", ErrConfig, c.Mode)
}

// build makes the layers, copies the initial values and prepares the
// step over the configured batch.
func (n *Net) build(layouts []*parallel.OpLayout) error {
	cfg := n.cfg
	if err := n.dev.SetMemory(cfg.Memory); err != nil {
		return err
	}
	for i, o := range n.def.ops {
		st := &stage{def: o}
		n.stages = append(n.stages, st)
		ol := layouts[i]
		specs, pls, partial := paramSpecs(o.spec, ol)
		for k, t := range specs {
			n.layouts[t.Name] = pls[k]
		}
		if o.build == nil {
			continue
		}
		layer, err := n.buildLayer(o, ol)
		if err != nil {
			return err
		}
		st.layer, st.params = layer, layer.Params()
		if len(st.params) != len(specs) {
			return fmt.Errorf("operator %s: its layer has %d parameters, its spec %d", o.spec.Name, len(st.params), len(specs))
		}
		for k, p := range st.params {
			if p.Name != specs[k].Name {
				return fmt.Errorf("operator %s: parameter %d is %s, the spec says %s", o.spec.Name, k, p.Name, specs[k].Name)
			}
			red := paramReduce{p: p, mean: !p.Trainable}
			switch {
			case n.hybrid && n.def.layerwise[p.Name]:
			case n.hybrid:
				if cfg.Devices > 1 {
					red.group, red.mean = n.all, red.mean || cfg.GradientsMean
				}
			case len(partial[k]) > 0:
				if red.group, err = pls[k].Group(cfg.Rank, partial[k]); err != nil {
					return fmt.Errorf("operator %s parameter %s: %w", o.spec.Name, p.Name, err)
				}
			}
			if red.group != nil {
				st.reduce = append(st.reduce, red)
			}
		}
		n.params = append(n.params, st.params...)
	}
	var values, grads int64
	for _, p := range n.params {
		values += int64(p.Value.Len())
		if p.Trainable {
			grads += int64(p.Value.Len())
		}
	}
	for _, r := range []struct {
		what  string
		bytes int64
	}{
		{cfg.Model + " parameters", 4 * values},
		{cfg.Model + " gradients", 4 * grads},
		// Momentum keeps one moment per gradient element; the trainer
		// reserves the same under the same name.
		{"optimizer moments", 4 * grads},
	} {
		if err := n.dev.Reserve(r.what, r.bytes); err != nil {
			return err
		}
	}
	p, err := n.newPass(n.def, layouts)
	if err != nil {
		return err
	}
	n.main = p
	n.passes[p.global] = p
	return nil
}

// buildLayer builds op's layer with this rank's slice shapes. Unless every
// parameter is whole on this rank, the whole layer is built on a throwaway
// device with the same seed and names, and this rank's box of each
// parameter copied from it, so every layout starts from the stand_alone
// values.
func (n *Net) buildLayer(o opDef, ol *parallel.OpLayout) (nn.Layer, error) {
	specs, pls, _ := paramSpecs(o.spec, ol)
	local := shapes{params: map[string][]int{}}
	whole := shapes{in: o.spec.Inputs[0].Shape, out: o.spec.Output.Shape, params: map[string][]int{}, whole: true}
	var err error
	if local.in, err = ol.Inputs[0].SliceShape(); err != nil {
		return nil, err
	}
	if local.out, err = ol.Output.SliceShape(); err != nil {
		return nil, err
	}
	boxes := make([]parallel.Box, len(specs))
	split := false
	for k, t := range specs {
		if boxes[k], err = pls[k].Box(n.cfg.Rank); err != nil {
			return nil, err
		}
		local.params[t.Name], whole.params[t.Name] = boxes[k].Shape, t.Shape
		split = split || !slices.Equal(boxes[k].Shape, t.Shape)
	}
	if !split {
		local.whole = true
		return o.build(local, n.cfg.Seed, n.dev)
	}
	layer, err := o.build(local, n.cfg.Seed, n.dev)
	if err != nil {
		return nil, err
	}
	scratch := nn.NewDevice(1)
	defer scratch.Close()
	full, err := o.build(whole, n.cfg.Seed, scratch)
	if err != nil {
		return nil, err
	}
	fullParams := full.Params()
	for k, p := range layer.Params() {
		if k >= len(fullParams) || !slices.Equal(p.Shape(), boxes[k].Shape) {
			return nil, fmt.Errorf("operator %s: parameter %s has shape %v, its slice %v", o.spec.Name, p.Name, p.Shape(), boxes[k].Shape)
		}
		src := fullParams[k]
		copyBox(p.Value.Data(), p.Shape(), zeros(len(p.Shape())), src.Value.Data(), src.Shape(), boxes[k].Offset, boxes[k].Shape)
	}
	return layer, nil
}

// newPass prepares a step over def's global batch with the given layouts.
func (n *Net) newPass(def *modelDef, layouts []*parallel.OpLayout) (*pass, error) {
	cfg := n.cfg
	x := def.ops[0].spec.Inputs[0].Shape
	p := &pass{global: x[0], layouts: layouts}
	p.data = dataLayout(x, cfg.Devices, cfg.FullBatch)
	last := len(def.ops) - 1
	if def.ops[last].spec.Kind != parallel.OpLoss {
		return nil, fmt.Errorf("%s: the last operator is %s, not the loss", def.name, def.ops[last].spec.Name)
	}
	prev := p.data
	for i, o := range def.ops {
		ol := layouts[i]
		fwd, err := newPlan(prev, ol.Inputs[0], cfg.Rank)
		if err != nil {
			return nil, fmt.Errorf("into operator %s: %w", o.spec.Name, err)
		}
		p.fwd = append(p.fwd, fwd)
		if i < last {
			bwd, err := newPlan(layouts[i+1].Inputs[0], ol.Output, cfg.Rank)
			if err != nil {
				return nil, fmt.Errorf("gradient into operator %s: %w", o.spec.Name, err)
			}
			p.bwd = append(p.bwd, bwd)
		}
		out, err := ol.Output.Group(cfg.Rank, ol.OutputPartial)
		if err != nil {
			return nil, err
		}
		grad, err := ol.Inputs[0].Group(cfg.Rank, ol.GradPartial[0])
		if err != nil {
			return nil, err
		}
		if len(ol.OutputPartial) == 0 {
			out = nil
		}
		if len(ol.GradPartial[0]) == 0 {
			grad = nil
		}
		p.outGroup, p.gradGroup = append(p.outGroup, out), append(p.gradGroup, grad)
		if err := n.checkHybrid(def, layouts, i, p.outGroup[i]); err != nil {
			return nil, err
		}
		prev = ol.Output
	}
	lossIn := layouts[last].Inputs[0]
	p.lossGroup = p.outGroup[last]
	rows, err := lossIn.SliceShape()
	if err != nil {
		return nil, err
	}
	p.lossRows = rows[0]
	var err2 error
	if p.labels, err2 = newPlan(rowsOf(p.data), rowsOf(lossIn), cfg.Rank); err2 != nil {
		return nil, fmt.Errorf("labels: %w", err2)
	}
	logits := parallel.Layout{DeviceMatrix: p.data.DeviceMatrix, TensorMap: []int{p.data.TensorMap[0], -1}, Shape: lossIn.Shape}
	if p.logits, err = newPlan(layouts[last-1].Output, logits, cfg.Rank); err != nil {
		return nil, fmt.Errorf("logits: %w", err)
	}
	var bytes int64
	for _, pl := range append(append([]*plan{p.labels, p.logits}, p.fwd...), p.bwd...) {
		bytes += pl.bytes()
	}
	if err := n.dev.Reserve(fmt.Sprintf("redistribution buffers (global batch %d)", p.global), bytes); err != nil {
		return nil, err
	}
	return p, nil
}

// checkHybrid refuses what the engine cannot run: in hybrid_parallel a
// partial output must go straight into the model's AllReduce over all
// devices; elsewhere there is no AllReduce operator.
func (n *Net) checkHybrid(def *modelDef, layouts []*parallel.OpLayout, i int, outGroup []int) error {
	o := def.ops[i].spec
	if o.Kind == parallel.OpAllReduce {
		if !n.hybrid {
			return fmt.Errorf("operator %s: an explicit AllReduce runs only in hybrid_parallel", o.Name)
		}
		if n.cfg.Devices > 1 && (i == 0 || len(layouts[i-1].OutputPartial) == 0) {
			return fmt.Errorf("operator %s: the operator before it gives no partial sum to add up", o.Name)
		}
		return nil
	}
	if !n.hybrid || outGroup == nil || o.Kind == parallel.OpLoss {
		return nil
	}
	if i+1 >= len(def.ops) || def.ops[i+1].spec.Kind != parallel.OpAllReduce {
		return fmt.Errorf("operator %s: its output is a partial sum and no AllReduce follows it (hybrid_parallel inserts none)", o.Name)
	}
	if len(outGroup) != n.cfg.Devices {
		return fmt.Errorf("operator %s: its output is partial over %d of %d devices; the AllReduce after it sums over all", o.Name, len(outGroup), n.cfg.Devices)
	}
	return nil
}

// dataLayout is how ranks receive a batch of shape x: split along the batch
// over all devices, or whole on every rank with full_batch.
func dataLayout(x []int, devices int, fullBatch bool) parallel.Layout {
	l := parallel.Layout{DeviceMatrix: []int{devices}, Shape: slices.Clone(x), TensorMap: make([]int, len(x))}
	for k := range l.TensorMap {
		l.TensorMap[k] = -1
	}
	if !fullBatch {
		l.TensorMap[0] = 0
	}
	return l
}

// rowsOf is the layout of a tensor's first dimension alone (the labels of
// a batch laid out as l).
func rowsOf(l parallel.Layout) parallel.Layout {
	return parallel.Layout{DeviceMatrix: l.DeviceMatrix, TensorMap: l.TensorMap[:1], Shape: l.Shape[:1]}
}

// passFor returns the pass for a batch of which this rank received rows.
func (n *Net) passFor(rows int) (*pass, error) {
	if rows < 1 {
		return nil, fmt.Errorf("%w: empty batch", ErrConfig)
	}
	global := rows
	if !n.cfg.FullBatch {
		global *= n.cfg.Devices
	}
	if p, ok := n.passes[global]; ok {
		return p, nil
	}
	def, err := define(n.cfg.Model, global, n.cfg.Classes)
	if err != nil {
		return nil, err
	}
	layouts, err := def.graph().Shard(n.strategy, n.cfg.Devices)
	if err != nil {
		return nil, fmt.Errorf("%s with a global batch of %d: %w", n.cfg.Model, global, err)
	}
	p, err := n.newPass(def, layouts)
	if err != nil {
		return nil, err
	}
	n.passes[global] = p
	return p, nil
}

func (n *Net) checkInput(x *tensor.Tensor) error {
	if x.Rank() != 4 || x.Dim(1) != imageChannels || x.Dim(2) != imageSide || x.Dim(3) != imageSide || x.Dim(0) < 1 {
		return fmt.Errorf("%s: input %v, want [N %d %d %d]: %w", n.cfg.Model, x.Shape(), imageChannels, imageSide, imageSide, tensor.ErrShape)
	}
	return nil
}

// forward runs every operator but the loss and returns the loss's input
// slice (logits in the loss's layout) and the last operator's output.
func (n *Net) forward(ctx context.Context, p *pass, x *tensor.Tensor, train bool) (lossIn, out *tensor.Tensor, err error) {
	cur := x
	last := len(n.stages) - 1
	for i, st := range n.stages[:last] {
		name := st.def.spec.Name
		in, err := p.fwd[i].run(ctx, n.cfg.Comm, cur)
		if err != nil {
			return nil, nil, fmt.Errorf("operator %s: %w", name, err)
		}
		if st.def.spec.Kind == parallel.OpAllReduce {
			if st.buf, err = alloc(n.dev, name+" output", st.buf, in.Shape()...); err != nil {
				return nil, nil, fmt.Errorf("operator %s: %w", name, err)
			}
			copy(st.buf.Data(), in.Data())
			if n.cfg.Devices == 1 {
				cur = st.buf
				continue
			}
			if err := n.cfg.Comm.GroupAllReduce(ctx, st.buf.Data(), collective.Sum, n.all); err != nil {
				return nil, nil, fmt.Errorf("operator %s: %w", name, err)
			}
			cur = st.buf
			continue
		}
		y, err := st.layer.Forward(in, train)
		if err != nil {
			return nil, nil, err
		}
		// hybrid_parallel leaves partial sums to the model's AllReduce.
		if g := p.outGroup[i]; g != nil && !n.hybrid {
			if err := n.cfg.Comm.GroupAllReduce(ctx, y.Data(), collective.Sum, g); err != nil {
				return nil, nil, fmt.Errorf("operator %s output: %w", name, err)
			}
		}
		cur = y
	}
	lossIn, err = p.fwd[last].run(ctx, n.cfg.Comm, cur)
	if err != nil {
		return nil, nil, fmt.Errorf("into the loss: %w", err)
	}
	return lossIn, cur, nil
}

// TrainStep runs forward, the loss, backward and every gradient reduction
// on x and labels, this rank's batch as the data pipeline delivers it (its
// shard, or the global batch with FullBatch). Afterwards the gradient of
// each of Params is final; the returned loss is the mean over the global
// batch, the same on every rank.
func (n *Net) TrainStep(ctx context.Context, x *tensor.Tensor, labels []int32) (float32, error) {
	if err := n.checkInput(x); err != nil {
		return 0, err
	}
	if len(labels) != x.Dim(0) {
		return 0, fmt.Errorf("%s: %d labels for %d images: %w", n.cfg.Model, len(labels), x.Dim(0), tensor.ErrShape)
	}
	p, err := n.passFor(x.Dim(0))
	if err != nil {
		return 0, err
	}
	logits, _, err := n.forward(ctx, p, x, true)
	if err != nil {
		return 0, err
	}
	lab, err := n.labelsFor(ctx, p, labels)
	if err != nil {
		return 0, err
	}
	sum, err := n.loss.forward(logits, lab)
	if err != nil {
		return 0, err
	}
	loss := sum
	if p.lossGroup != nil {
		buf := []float32{float32(sum)}
		if err := n.cfg.Comm.GroupAllReduce(ctx, buf, collective.Sum, p.lossGroup); err != nil {
			return 0, fmt.Errorf("loss: %w", err)
		}
		loss = float64(buf[0])
	}
	if err := n.backward(ctx, p); err != nil {
		return 0, err
	}
	if err := n.reduceParams(ctx); err != nil {
		return 0, err
	}
	return float32(loss / float64(p.global)), nil
}

// labelsFor moves this rank's labels to the rows of the loss's slice.
func (n *Net) labelsFor(ctx context.Context, p *pass, labels []int32) ([]int32, error) {
	if p.labels.identity {
		return labels, nil
	}
	f := make([]float32, len(labels))
	for i, v := range labels {
		f[i] = float32(v)
	}
	t, err := tensor.FromSlice(f, len(f))
	if err != nil {
		return nil, err
	}
	out, err := p.labels.run(ctx, n.cfg.Comm, t)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	lab := make([]int32, out.Len())
	for i, v := range out.Data() {
		lab[i] = int32(v)
	}
	return lab, nil
}

// backward runs the loss's backward and every operator's, reducing partial
// input gradients on the way.
func (n *Net) backward(ctx context.Context, p *pass) error {
	// The loss is a mean over the global batch: the gradient scale is
	// 1/global (semi_auto, auto), times the device count for the sum of
	// per-device means; hybrid_parallel divides by the rows each device's
	// loss sees and leaves the rest to its reductions.
	inv := 1 / float64(p.global)
	switch {
	case n.hybrid:
		inv = 1 / float64(p.lossRows)
	case !n.cfg.GradientsMean:
		inv = float64(n.cfg.Devices) / float64(p.global)
	}
	d := n.loss.backward(inv)
	for i := len(n.stages) - 2; i >= 0; i-- {
		st := n.stages[i]
		name := st.def.spec.Name
		dy, err := p.bwd[i].run(ctx, n.cfg.Comm, d)
		if err != nil {
			return fmt.Errorf("gradient of operator %s: %w", name, err)
		}
		if st.def.spec.Kind == parallel.OpAllReduce {
			d = dy // the gradient of a sum passes to every summand
			continue
		}
		if d, err = st.layer.Backward(dy); err != nil {
			return err
		}
		if g := p.gradGroup[i]; g != nil && i > 0 {
			if err := n.cfg.Comm.GroupAllReduce(ctx, d.Data(), collective.Sum, g); err != nil {
				return fmt.Errorf("input gradient of operator %s: %w", name, err)
			}
		}
	}
	return nil
}

// reduceParams sums (or averages) the parameter gradients over the ranks
// they are partial over, and averages the BatchNorm statistics a split
// batch left different on each rank.
func (n *Net) reduceParams(ctx context.Context) error {
	for _, st := range n.stages {
		for _, r := range st.reduce {
			buf := r.p.Value.Data()
			if r.p.Trainable {
				buf = r.p.Grad.Data()
			}
			if err := n.cfg.Comm.GroupAllReduce(ctx, buf, collective.Sum, r.group); err != nil {
				return fmt.Errorf("parameter %s: %w", r.p.Name, err)
			}
			if r.mean {
				inv := 1 / float32(len(r.group))
				for i := range buf {
					buf[i] *= inv
				}
			}
		}
	}
	return nil
}

// Predict returns the logits [rows classes] of x, this rank's batch as
// the data pipeline delivers it, with the moving statistics of BatchNorm.
// Every rank calls it.
func (n *Net) Predict(ctx context.Context, x *tensor.Tensor) (*tensor.Tensor, error) {
	if err := n.checkInput(x); err != nil {
		return nil, err
	}
	p, err := n.passFor(x.Dim(0))
	if err != nil {
		return nil, err
	}
	_, out, err := n.forward(ctx, p, x, false)
	if err != nil {
		return nil, err
	}
	logits, err := p.logits.run(ctx, n.cfg.Comm, out)
	if err != nil {
		return nil, fmt.Errorf("logits: %w", err)
	}
	res, err := tensor.New(logits.Shape()...)
	if err != nil {
		return nil, err
	}
	copy(res.Data(), logits.Data())
	return res, nil
}

// Params returns this rank's slices of every parameter, in the
// stand_alone model's order with its names; Trainable as there.
func (n *Net) Params() []*nn.Param { return n.params }

// Device returns the rank's simulated device.
func (n *Net) Device() *nn.Device { return n.dev }

// Layouts returns the whole-tensor layout of every parameter, by name (for
// the strategy file).
func (n *Net) Layouts() map[string]parallel.Layout { return n.layouts }

// OpLayouts returns how every operator runs over the configured global
// batch.
func (n *Net) OpLayouts() []*parallel.OpLayout { return n.main.layouts }

// Gather returns every parameter's whole value on root (nil on the other
// ranks), for integrated_save. All ranks call it. Each slice is sent by
// the lowest rank holding it.
func (n *Net) Gather(ctx context.Context, root int) (map[string][]float32, error) {
	d := n.cfg.Devices
	if root < 0 || root >= d {
		return nil, fmt.Errorf("%w: gather on rank %d of %d", ErrConfig, root, d)
	}
	type part struct {
		name string
		box  parallel.Box
	}
	// parts[r] are the slices rank r sends, in parameter order.
	parts := make([][]part, d)
	for _, p := range n.params {
		l := n.layouts[p.Name]
		var seen []parallel.Box
		for r := range d {
			b, err := l.Box(r)
			if err != nil {
				return nil, fmt.Errorf("gather %s: %w", p.Name, err)
			}
			if slices.ContainsFunc(seen, func(s parallel.Box) bool { return slices.Equal(s.Offset, b.Offset) }) {
				continue
			}
			seen = append(seen, b)
			parts[r] = append(parts[r], part{p.Name, b})
		}
	}
	byName := map[string]*nn.Param{}
	for _, p := range n.params {
		byName[p.Name] = p
	}
	send, recv := make([][]float32, d), make([][]float32, d)
	size := 0
	for _, pt := range parts[n.cfg.Rank] {
		size += volume(pt.box.Shape)
	}
	send[root] = make([]float32, 0, size)
	for _, pt := range parts[n.cfg.Rank] {
		send[root] = append(send[root], byName[pt.name].Value.Data()...)
	}
	if n.cfg.Rank == root {
		for r := range d {
			size := 0
			for _, pt := range parts[r] {
				size += volume(pt.box.Shape)
			}
			recv[r] = make([]float32, size)
		}
	}
	if d == 1 {
		copy(recv[0], send[0])
	} else if err := n.cfg.Comm.Exchange(ctx, send, recv); err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	if n.cfg.Rank != root {
		return nil, nil
	}
	out := map[string][]float32{}
	for _, p := range n.params {
		out[p.Name] = make([]float32, volume(n.layouts[p.Name].Shape))
	}
	for r := range d {
		off := 0
		for _, pt := range parts[r] {
			shape := n.layouts[pt.name].Shape
			copyBox(out[pt.name], shape, pt.box.Offset, recv[r][off:], pt.box.Shape, zeros(len(shape)), pt.box.Shape)
			off += volume(pt.box.Shape)
		}
	}
	return out, nil
}

// Close stops the device's worker goroutines.
func (n *Net) Close() { n.dev.Close() }
