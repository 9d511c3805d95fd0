package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

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
	// DatasetStrategy is MindSpore's dataset_strategy in its tuple form
	// (nil: unset), for semi_auto_parallel and auto_parallel: one split
	// list for the images [N C H W] and one for the labels [N]. Each rank
	// receives the box of the images its place in the split selects,
	// BatchPerDevice rows of it; the global batch is BatchPerDevice times
	// the batch split. Not with FullBatch.
	DatasetStrategy [][]int
	// GradientsMean selects mean gradients (MindSpore's gradients_mean);
	// false gives the sum of the per-device means.
	GradientsMean bool
	Seed          uint64 // initial parameters, as the stand_alone models draw them
	Threads       int    // worker goroutines of the device (0: GOMAXPROCS)
	Memory        int64  // device capacity in bytes (0: unlimited)
	Classes       int    // 0: DefaultClasses
	// Pipeline, when it has several stages, makes this rank one of stage
	// Pipeline.Stage's: Devices, Rank and Comm are then those of the
	// stage's group, BatchPerDevice is per rank of a group, and TrainStep
	// receives the whole global batch on every rank (the first stage reads
	// the images, the last the labels).
	Pipeline Pipeline
	// ParallelOptimizer splits the update of every trainable parameter
	// that ranks repeat across those ranks (MindSpore's
	// enable_parallel_optimizer): each updates and keeps the moment of
	// one piece along dimension 0, and the pieces are gathered before the
	// next forward. OptimizerShardSize is the number of pieces
	// (optimizer_weight_shard_size; 0: all the ranks that repeat it).
	ParallelOptimizer  bool
	OptimizerShardSize int
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
	buckets  []*bucket
	// optShards are the parameters whose update is split across ranks
	// (the parallel optimizer); view is Params(): the layers' parameters
	// with each of those replaced by this rank's piece of it.
	optShards              []*optShard
	view                   []*nn.Param
	gatherSend, gatherRecv [][]float32
	scatterSend            [][]float32
	scatterRecv            [][]float32
	scatterBuf             []float32
	comm                   *timedComm // cfg.Comm, counted; nil on one device
	// firstParam is the first operator with parameters, where backward
	// ends.
	firstParam int
	pipe       *pipeState // nil without pipeline stages
	// win is the C, H and W of the images this rank receives.
	win [3]int
	// stepCtx is the context of the running TrainStep, for the BatchNorm
	// statistics reductions nn calls back into (nn's layers take none).
	stepCtx context.Context
}

// stage is one operator on this rank.
type stage struct {
	def    opDef
	layer  nn.Layer // nil for the loss and AllReduce
	params []*nn.Param
	buf    *tensor.Tensor // AllReduce's output
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
	def, strategy, layouts, err := cfg.lay()
	if err != nil {
		return nil, err
	}
	n := &Net{cfg: cfg, def: def, passes: map[int]*pass{}, layouts: map[string]parallel.Layout{}, strategy: strategy}
	if cfg.Pipeline.on() {
		span, err := cfg.stageSpan(def)
		if err != nil {
			return nil, err
		}
		micro := max(cfg.Pipeline.Micro, 1)
		n.pipe = &pipeState{cfg: cfg.Pipeline, micro: micro, span: span,
			prog: program(cfg.Pipeline.Schedule, cfg.Pipeline.Stage, cfg.Pipeline.Stages, micro)}
	}
	if cfg.Comm != nil {
		n.comm = &timedComm{Comm: cfg.Comm}
		n.cfg.Comm = n.comm
	}
	n.hybrid = cfg.Mode == parallel.HybridParallel
	for r := range cfg.Devices {
		n.all = append(n.all, r)
	}
	n.dev = nn.NewDevice(cfg.Threads)
	n.loss.dev = n.dev
	if err := n.build(layouts); err != nil {
		n.dev.Close()
		return nil, fmt.Errorf("%s rank %d: %w", cfg.Model, cfg.Rank, err)
	}
	return n, nil
}

// lay defines the model for the job's global batch, picks the strategy the
// mode runs it with and lays every operator out over the devices: what New
// builds and LayoutOf reports.
func (c *Config) lay() (*modelDef, parallel.Strategy, []*parallel.OpLayout, error) {
	global := c.globalBatch(c.BatchPerDevice)
	if c.Pipeline.on() {
		// Each pass runs one micro-batch.
		global /= max(c.Pipeline.Micro, 1)
	}
	def, err := define(c.Model, global, c.Classes)
	if err != nil {
		return nil, nil, nil, err
	}
	strategy, err := c.strategy(def)
	if err != nil {
		return nil, nil, nil, err
	}
	layouts, err := def.graph().Shard(strategy, c.Devices)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s in %s: %w", c.Model, c.Mode, err)
	}
	return def, strategy, layouts, nil
}

// globalBatch is the global batch of a step in which each rank receives
// rows rows.
func (c *Config) globalBatch(rows int) int {
	switch {
	case c.FullBatch:
		return rows
	case c.DatasetStrategy != nil:
		return rows * c.DatasetStrategy[0][0]
	}
	return rows * c.Devices
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
	if err := c.checkOptimizer(); err != nil {
		return err
	}
	if err := c.checkPipeline(); err != nil {
		return err
	}
	return c.checkDataset()
}

// checkOptimizer checks the parallel optimizer's settings: the modes
// that take it, a shard size only with it.
func (c *Config) checkOptimizer() error {
	switch {
	case c.OptimizerShardSize < 0 || c.OptimizerShardSize > 0 && !c.ParallelOptimizer:
		return fmt.Errorf("%w: optimizer shard size %d (it needs the parallel optimizer, and at least 1)", ErrConfig, c.OptimizerShardSize)
	case c.ParallelOptimizer && (c.Mode == parallel.StandAlone || c.Mode == parallel.HybridParallel):
		return fmt.Errorf("%w: the parallel optimizer is for data_parallel, semi_auto_parallel and auto_parallel, not %s", ErrConfig, c.Mode)
	}
	return nil
}

// checkDataset checks the dataset strategy: the tuple form, in the modes
// that take one, not with full_batch.
func (c *Config) checkDataset() error {
	if c.DatasetStrategy == nil {
		return nil
	}
	if c.Mode != parallel.SemiAutoParallel && c.Mode != parallel.AutoParallel {
		return fmt.Errorf("%w: a dataset_strategy tuple is for semi_auto_parallel and auto_parallel, not %s", ErrConfig, c.Mode)
	}
	if err := (parallel.DatasetStrategy{Splits: c.DatasetStrategy}).CheckWith(c.FullBatch); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := CheckDatasetStrategy(c.DatasetStrategy, c.Devices); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// strategy returns the strategy the mode runs def with: the one given
// (the user's, or auto_parallel's search result), a hybrid_parallel
// model's own, or none. Which mode takes what is parallel.Mode.CheckStrategy
// and CheckModelMode, the rules the npu/train stage checks too.
func (c *Config) strategy(def *modelDef) (parallel.Strategy, error) {
	if !slices.Contains(parallel.Modes(), c.Mode) {
		return nil, fmt.Errorf("%w: mode %v", ErrConfig, c.Mode)
	}
	if err := def.checkMode(c.Mode); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if len(c.Strategy) > 0 {
		if err := c.Mode.CheckStrategy(true); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, def.name, err)
		}
		return FollowDataset(def.graph(), c.Strategy, c.DatasetStrategy, c.Devices, false), nil
	}
	if c.Mode == parallel.HybridParallel && def.declared != nil {
		return def.declared(c.Devices), nil
	}
	return FollowDataset(def.graph(), parallel.Strategy{}, c.DatasetStrategy, c.Devices, false), nil
}

// build makes the layers, copies the initial values and prepares the
// step over the configured batch.
func (n *Net) build(layouts []*parallel.OpLayout) error {
	cfg := n.cfg
	if err := n.dev.SetMemory(cfg.Memory); err != nil {
		return err
	}
	// Backward stops at the first operator with parameters: the gradients
	// of what comes before it (the images, a flatten) have no consumer.
	n.firstParam = slices.IndexFunc(n.def.ops, func(o opDef) bool { return len(o.spec.Params()) > 0 })
	if n.firstParam < 0 {
		return fmt.Errorf("%s has no parameters to train", n.def.name)
	}
	lo, hi := n.opRange()
	for i, o := range n.def.ops {
		st := &stage{def: o}
		n.stages = append(n.stages, st)
		if i < lo || i >= hi {
			continue // another pipeline stage's
		}
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
		whole, err := n.setSpatialStats(layer, ol)
		if err != nil {
			return fmt.Errorf("operator %s: %w", o.spec.Name, err)
		}
		if c, ok := layer.(interface{ SkipInputGrad() }); ok && i == n.firstParam {
			c.SkipInputGrad()
		}
		st.layer, st.params = layer, layer.Params()
		if len(st.params) != len(specs) {
			return fmt.Errorf("operator %s: its layer has %d parameters, its spec %d", o.spec.Name, len(st.params), len(specs))
		}
		for k, p := range st.params {
			if p.Name != specs[k].Name {
				return fmt.Errorf("operator %s: parameter %d is %s, the spec says %s", o.spec.Name, k, p.Name, specs[k].Name)
			}
			if p.Trainable == specs[k].Frozen {
				// LayoutOf decides from the spec which parameters the
				// parallel optimizer splits: it must say what the layer does.
				return fmt.Errorf("operator %s: parameter %s: trainable %v, but its spec says frozen %v", o.spec.Name, p.Name, p.Trainable, specs[k].Frozen)
			}
			view := p
			sh, err := n.shardOptimizer(p, specs[k], pls[k])
			if err != nil {
				return fmt.Errorf("operator %s: %w", o.spec.Name, err)
			}
			if sh != nil {
				n.optShards = append(n.optShards, sh)
				view = sh.piece
			}
			n.view = append(n.view, view)
			red := paramReduce{p: p, mean: !p.Trainable}
			switch {
			case n.hybrid && n.def.layerwise[p.Name]:
			case n.hybrid:
				if cfg.Devices > 1 {
					red.mean = red.mean || cfg.GradientsMean
					n.addReduce("all", n.all, red)
				}
			case len(withoutAxes(partial[k], whole)) > 0:
				key, group, err := partition(pls[k], withoutAxes(partial[k], whole), cfg.Rank)
				if err != nil {
					return fmt.Errorf("operator %s parameter %s: %w", o.spec.Name, p.Name, err)
				}
				if sh != nil && slices.Equal(group, sh.group) {
					// Reduced over the ranks that split its update: each
					// needs the sum of its piece only (ReduceScatter).
					sh.scatter = true
					continue
				}
				n.addReduce(key, group, red)
			}
		}
		n.params = append(n.params, st.params...)
	}
	n.gatherSend, n.gatherRecv = make([][]float32, cfg.Devices), make([][]float32, cfg.Devices)
	var values, grads, moments, packed int64
	for _, b := range n.buckets {
		size := 0
		for _, e := range b.entries {
			size += e.p.Value.Len()
		}
		if err := n.allocBucket(b, size); err != nil {
			return err
		}
		packed += int64(size)
	}
	for i, p := range n.params {
		values += int64(p.Value.Len())
		if p.Trainable {
			grads += int64(p.Value.Len())
			moments += int64(n.view[i].Value.Len())
		}
	}
	for _, r := range []struct {
		what  string
		bytes int64
	}{
		{cfg.Model + " parameters", 4 * values},
		{cfg.Model + " gradients", 4 * grads},
		// Momentum keeps one moment per element it updates (this rank's
		// pieces with the parallel optimizer); the trainer reserves the
		// same under the same name.
		{"optimizer moments", 4 * moments},
		{"gradient reduction buffers", 4 * packed},
		{"gradient reduce-scatter buffers", 4 * int64(n.scatterLen())},
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
	box, err := p.data.Box(cfg.Rank)
	if err != nil {
		return err
	}
	copy(n.win[:], box.Shape[1:])
	if n.pipe != nil {
		return n.buildPipe()
	}
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
	h, err := haloOf(o, ol, n.cfg.Rank)
	if err != nil {
		return nil, err
	}
	if h != nil {
		local.in, local.pad = h.ext[n.cfg.Rank].Shape, &h.pad
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
		parallel.CopyBox(p.Value.Data(), p.Shape(), nil, src.Value.Data(), src.Shape(), boxes[k].Offset, boxes[k].Shape)
	}
	return layer, nil
}

// Params returns this rank's slices of every parameter, in the
// stand_alone model's order with its names; Trainable as there. With the
// parallel optimizer a parameter whose update is split across ranks is
// this rank's piece of its slice (PieceBoxes): what the optimizer updates
// and a checkpoint holds.
func (n *Net) Params() []*nn.Param { return n.view }

// Device returns the rank's simulated device.
func (n *Net) Device() *nn.Device { return n.dev }

// Layouts returns the whole-tensor layout of every parameter, by name (for
// the strategy file).
func (n *Net) Layouts() map[string]parallel.Layout { return n.layouts }

// OpLayouts returns how every operator runs over the configured global
// batch (a micro-batch with pipeline stages); nil for the operators of
// other pipeline stages.
func (n *Net) OpLayouts() []*parallel.OpLayout {
	if n.pipe == nil {
		return n.main.layouts
	}
	return stageOps(n.main.layouts, n.pipe.span)
}

// stageOps is ops with those outside span nil: what one pipeline stage
// runs (Net.OpLayouts) and LayoutOf reports.
func stageOps(ops []*parallel.OpLayout, span StageSpan) []*parallel.OpLayout {
	out := make([]*parallel.OpLayout, len(ops))
	copy(out[span.Lo:span.Hi], ops[span.Lo:span.Hi])
	return out
}

// StrategyFile returns the strategy file of the rank's network, as the
// job's rank 0 writes it (a pipeline stage's first rank its stage's, with
// current_stage): LayoutOf's JobLayout.StrategyFile gives the same file
// without building the network.
func (n *Net) StrategyFile() *parallel.StrategyFile {
	l := JobLayout{Ops: n.OpLayouts(), Params: n.Layouts(), Optimizer: n.OptimizerLayouts()}
	if n.pipe != nil {
		l.Stage = n.pipe.cfg.Stage
	}
	return l.StrategyFile()
}

// Gather returns every parameter's whole value on root (nil on the other
// ranks), for integrated_save. All ranks call it. Each slice is sent by
// the lowest rank holding it.
func (n *Net) Gather(ctx context.Context, root int) (map[string][]float32, error) {
	values := make(map[string][]float32, len(n.view))
	for _, p := range n.view {
		values[p.Name] = p.Value.Data()
	}
	return n.GatherSlices(ctx, root, values)
}

// GatherSlices is Gather for any data laid out as the parameters are: this
// rank's slice of each named tensor, a parameter or its optimizer moment
// ("moments.<parameter>"), becomes the whole tensor on root (nil on the
// other ranks). Each distinct slice travels once, from the lowest rank
// holding it; every rank calls it with the same names.
func (n *Net) GatherSlices(ctx context.Context, root int, local map[string][]float32) (map[string][]float32, error) {
	d := n.cfg.Devices
	if root < 0 || root >= d {
		return nil, fmt.Errorf("%w: gather on rank %d of %d", ErrConfig, root, d)
	}
	names := slices.Sorted(maps.Keys(local))
	layouts := make(map[string]parallel.Layout, len(names))
	pieces := map[string][]parallel.Box{} // optimizer-sharded: each rank's piece
	for _, name := range names {
		param := name
		l, ok := n.layouts[name]
		if !ok {
			param = strings.TrimPrefix(name, "moments.")
			l, ok = n.layouts[param]
		}
		if !ok {
			return nil, fmt.Errorf("%w: gather %s: no parameter has that name", ErrConfig, name)
		}
		layouts[name] = l
		if i := slices.IndexFunc(n.optShards, func(s *optShard) bool { return s.full.Name == param }); i >= 0 {
			b, err := n.optShards[i].layout.Boxes(l.Shape)
			if err != nil {
				return nil, fmt.Errorf("gather %s: %w", name, err)
			}
			pieces[name] = b
		}
	}
	type part struct {
		name string
		box  parallel.Box
	}
	// parts[r] are the slices rank r sends, in name order.
	parts := make([][]part, d)
	for _, name := range names {
		var seen []parallel.Box
		for r := range d {
			b, err := layouts[name].Box(r)
			if err != nil {
				return nil, fmt.Errorf("gather %s: %w", name, err)
			}
			if p, ok := pieces[name]; ok {
				b = p[r]
			}
			if slices.ContainsFunc(seen, func(s parallel.Box) bool { return slices.Equal(s.Offset, b.Offset) }) {
				continue
			}
			seen = append(seen, b)
			parts[r] = append(parts[r], part{name, b})
		}
	}
	send, recv := make([][]float32, d), make([][]float32, d)
	size := 0
	for _, pt := range parts[n.cfg.Rank] {
		size += volume(pt.box.Shape)
	}
	send[root] = make([]float32, 0, size)
	for _, pt := range parts[n.cfg.Rank] {
		if len(local[pt.name]) != volume(pt.box.Shape) {
			return nil, fmt.Errorf("%w: gather %s: %d values, this rank's slice %v has %d", ErrConfig, pt.name, len(local[pt.name]), pt.box.Shape, volume(pt.box.Shape))
		}
		send[root] = append(send[root], local[pt.name]...)
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
	out := make(map[string][]float32, len(names))
	for _, name := range names {
		out[name] = make([]float32, volume(layouts[name].Shape))
	}
	for r := range d {
		off := 0
		for _, pt := range parts[r] {
			shape := layouts[pt.name].Shape
			parallel.CopyBox(out[pt.name], shape, pt.box.Offset, recv[r][off:], pt.box.Shape, nil, pt.box.Shape)
			off += volume(pt.box.Shape)
		}
	}
	return out, nil
}

// CommStats returns how many collective calls (Exchange, GroupAllReduce)
// this rank has made since New and the time it spent in them, waiting for
// its peers included: a step's communication apart from its computation.
func (n *Net) CommStats() (calls int, elapsed time.Duration) {
	if n.comm == nil {
		return 0, 0
	}
	return n.comm.calls, n.comm.elapsed
}

// Close stops the device's worker goroutines.
func (n *Net) Close() { n.dev.Close() }
