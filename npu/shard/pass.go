package shard

import (
	"fmt"
	"slices"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// pass is what a step over one global batch size needs: the layouts of
// every operator and the redistributions between them.
type pass struct {
	global  int
	layouts []*parallel.OpLayout
	data    parallel.Layout // the input batch as ranks receive it
	// fwd[i] brings op i's input from the previous layout (the data layout
	// for i = 0); bwd[i] brings op i's output gradient from op i+1's input
	// layout.
	fwd, bwd []*plan
	// halo[i] sums the gradient of the halo box op i computed from back
	// into the input slices of its owners (nil: op i reads no halo).
	halo   []*haloSum
	labels *plan // labels from the data layout to the loss's rows
	// labelsOn is the operator whose input's redistribution the labels
	// are fused to (plan.fuse), the first that moves data, or -1: a
	// training step moves them in the same Exchange (runFwd).
	// labelsSrc holds them, as floats, until then; labelsMoved after.
	labelsOn               int
	labelsSrc, labelsMoved *tensor.Tensor
	labelsIn               *tensor.Tensor
	labelsOut              []int32
	logits                 *plan // Predict: the last output back to the data's rows
	outGroup               [][]int
	gradGroup              [][]int
	lossGroup              []int
	lossSum                [1]float32
	lossRows               int // rows of the loss's slice on this rank
}

// newPass prepares a step over def's global batch with the given layouts.
func (n *Net) newPass(def *modelDef, layouts []*parallel.OpLayout) (*pass, error) {
	cfg := n.cfg
	x := def.ops[0].spec.Inputs[0].Shape
	p := &pass{global: x[0], layouts: layouts, labelsOn: -1}
	// A pipeline stage receives the whole batch and runs one micro-batch
	// of it at a time.
	dc := cfg
	if n.pipe != nil {
		dc.FullBatch = true
	}
	p.data = dataLayout(x, dc)
	last := len(def.ops) - 1
	if def.ops[last].spec.Kind != parallel.OpLoss {
		return nil, fmt.Errorf("%s: the last operator is %s, not the loss", def.name, def.ops[last].spec.Name)
	}
	lo, hi := n.opRange()
	prev := p.data
	if lo > 0 {
		prev = layouts[lo-1].Output // as the previous stage's rank of this index left it
	}
	for i, o := range def.ops {
		ol := layouts[i]
		if i < lo || i >= hi {
			p.fwd, p.outGroup, p.gradGroup = append(p.fwd, nil), append(p.outGroup, nil), append(p.gradGroup, nil)
			p.halo = append(p.halo, nil)
			if i < last {
				p.bwd = append(p.bwd, nil)
			}
			continue
		}
		h, err := haloOf(o, ol, cfg.Rank)
		if err != nil {
			return nil, err
		}
		var fwd *plan
		var sum *haloSum
		if h != nil {
			// The input comes with the rows and columns of the
			// neighbours the window reads.
			fwd, err = newBoxPlan(prev, h.ext, cfg.Rank)
			sum = newHaloSum(h, cfg.Rank)
		} else {
			fwd, err = newPlan(prev, ol.Inputs[0], cfg.Rank)
		}
		if err != nil {
			return nil, fmt.Errorf("into operator %s: %w", o.spec.Name, err)
		}
		p.fwd, p.halo = append(p.fwd, fwd), append(p.halo, sum)
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
	if hi <= last {
		return p, n.reservePlans(p) // the loss is on a later stage
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
	if n.pipe == nil && !p.labels.identity {
		// The labels are there from the start of a step: they can move
		// in the first Exchange of the forward pass, saving a round.
		if i := slices.IndexFunc(p.fwd, func(f *plan) bool { return f != nil && !f.identity }); i >= 0 {
			p.fwd[i].fuse(p.labels)
			p.labelsOn = i
		}
	}
	logits := parallel.Layout{DeviceMatrix: p.data.DeviceMatrix, TensorMap: []int{p.data.TensorMap[0], -1}, Shape: lossIn.Shape}
	if p.logits, err = newPlan(layouts[last-1].Output, logits, cfg.Rank); err != nil {
		return nil, fmt.Errorf("logits: %w", err)
	}
	return p, n.reservePlans(p)
}

// reservePlans reserves the buffers of p's redistributions.
func (n *Net) reservePlans(p *pass) error {
	var bytes int64
	for _, pl := range append(append([]*plan{p.labels, p.logits}, p.fwd...), p.bwd...) {
		if pl != nil {
			bytes += pl.bytes()
		}
	}
	for _, h := range p.halo {
		if h != nil {
			bytes += h.bytes()
		}
	}
	return n.dev.Reserve(fmt.Sprintf("redistribution buffers (global batch %d)", p.global), bytes)
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
// over all devices, whole on every rank with full_batch, or cut as the
// dataset strategy's image split list says.
func dataLayout(x []int, cfg Config) parallel.Layout {
	if cfg.DatasetStrategy != nil {
		return splitLayout(x, cfg.DatasetStrategy[0], cfg.Devices)
	}
	l := parallel.Layout{DeviceMatrix: []int{cfg.Devices}, Shape: slices.Clone(x), TensorMap: make([]int, len(x))}
	for k := range l.TensorMap {
		l.TensorMap[k] = -1
	}
	if !cfg.FullBatch {
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
	global := n.cfg.globalBatch(rows)
	if n.pipe != nil { // a pipeline stage receives the whole batch
		global = rows
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
