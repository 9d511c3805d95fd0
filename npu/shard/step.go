package shard

import (
	"context"
	"fmt"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// checkInput checks that x is a batch of CIFAR images, the input of every
// model, or of this rank's windows of them under a dataset strategy.
func (n *Net) checkInput(x *tensor.Tensor) error {
	c, h, w := n.window()
	if x.Rank() != 4 || x.Dim(1) != c || x.Dim(2) != h || x.Dim(3) != w || x.Dim(0) < 1 {
		return fmt.Errorf("%s: input %v, want [N %d %d %d]: %w", n.cfg.Model, x.Shape(), c, h, w, tensor.ErrShape)
	}
	return nil
}

// window returns the C, H and W of the images this rank receives.
func (n *Net) window() (c, h, w int) { return n.win[0], n.win[1], n.win[2] }

// forward runs every operator but the loss and returns the loss's input
// slice (logits in the loss's layout) and the last operator's output.
func (n *Net) forward(ctx context.Context, p *pass, x *tensor.Tensor, train bool) (lossIn, out *tensor.Tensor, err error) {
	last := len(n.stages) - 1
	cur, err := n.runOps(ctx, p, x, 0, last, train)
	if err != nil {
		return nil, nil, err
	}
	lossIn, err = n.runFwd(ctx, p, last, cur)
	if err != nil {
		return nil, nil, fmt.Errorf("into the loss: %w", err)
	}
	return lossIn, cur, nil
}

// runFwd brings operator i's input cur into its layout, with the labels
// in the same Exchange when they ride on it and are waiting (labelsSrc).
func (n *Net) runFwd(ctx context.Context, p *pass, i int, cur *tensor.Tensor) (*tensor.Tensor, error) {
	if i != p.labelsOn || p.labelsSrc == nil {
		return p.fwd[i].run(ctx, n.cfg.Comm, cur)
	}
	in, labels, err := p.fwd[i].runWith(ctx, n.cfg.Comm, cur, p.labelsSrc)
	if err != nil {
		return nil, fmt.Errorf("with the labels: %w", err)
	}
	p.labelsSrc, p.labelsMoved = nil, labels
	return in, nil
}

// runOps runs operators lo..hi-1 (none of them the loss) forward on cur,
// the output of operator lo-1 (the batch for lo = 0) in the layout that
// operator left it, and returns operator hi-1's output: complete, in its
// layout.
func (n *Net) runOps(ctx context.Context, p *pass, cur *tensor.Tensor, lo, hi int, train bool) (*tensor.Tensor, error) {
	for i := lo; i < hi; i++ {
		st := n.stages[i]
		name := st.def.spec.Name
		in, err := n.runFwd(ctx, p, i, cur)
		if err != nil {
			return nil, fmt.Errorf("operator %s: %w", name, err)
		}
		if st.def.spec.Kind == parallel.OpAllReduce {
			if st.buf, err = alloc(n.dev, name, "output", st.buf, in.Shape()...); err != nil {
				return nil, fmt.Errorf("operator %s: %w", name, err)
			}
			copy(st.buf.Data(), in.Data())
			if n.cfg.Devices == 1 {
				cur = st.buf
				continue
			}
			if err := n.cfg.Comm.GroupAllReduce(ctx, st.buf.Data(), collective.Sum, n.all); err != nil {
				return nil, fmt.Errorf("operator %s: %w", name, err)
			}
			cur = st.buf
			continue
		}
		y, err := st.layer.Forward(in, train)
		if err != nil {
			return nil, err
		}
		// Summed in place: no layer whose contraction can be split reads
		// its output in Backward. hybrid_parallel leaves partial sums to
		// the model's AllReduce.
		if g := p.outGroup[i]; g != nil && !n.hybrid {
			if err := n.cfg.Comm.GroupAllReduce(ctx, y.Data(), collective.Sum, g); err != nil {
				return nil, fmt.Errorf("operator %s output: %w", name, err)
			}
		}
		cur = y
	}
	return cur, nil
}

// TrainStep runs forward, the loss, backward and every gradient reduction
// on x and labels, this rank's batch as the data pipeline delivers it (its
// shard, or the global batch with FullBatch). Afterwards the gradient of
// each of Params is final; the returned loss is the mean over the global
// batch, the same on every rank.
func (n *Net) TrainStep(ctx context.Context, x *tensor.Tensor, labels []int32) (float32, error) {
	n.stepCtx = ctx
	defer func() { n.stepCtx = nil }()
	if err := n.checkInput(x); err != nil {
		return 0, err
	}
	if len(labels) != x.Dim(0) {
		return 0, fmt.Errorf("%s: %d labels for %d images: %w", n.cfg.Model, len(labels), x.Dim(0), tensor.ErrShape)
	}
	if n.pipe != nil {
		return n.pipeStep(ctx, x, labels)
	}
	p, err := n.passFor(x.Dim(0))
	if err != nil {
		return 0, err
	}
	if err := n.gatherWeights(ctx); err != nil {
		return 0, err
	}
	if p.labelsOn >= 0 {
		if p.labelsSrc, err = n.labelsIn(p, labels); err != nil {
			return 0, err
		}
		defer func() { p.labelsSrc, p.labelsMoved = nil, nil }() // never left for another step
	}
	logits, _, err := n.forward(ctx, p, x, true)
	if err != nil {
		return 0, err
	}
	var lab []int32
	if p.labelsMoved != nil {
		lab = n.labelsOut(p, p.labelsMoved)
	} else if lab, err = n.labelsFor(ctx, p, labels); err != nil {
		return 0, err
	}
	sum, err := n.loss.forward(logits, lab)
	if err != nil {
		return 0, err
	}
	loss := sum
	p.lossSum[0] = float32(sum)
	rides := -1 // the bucket the loss's sum rides in, if any
	if p.lossGroup != nil {
		if rides = n.lossBucket(p.lossGroup); rides < 0 {
			if err := n.cfg.Comm.GroupAllReduce(ctx, p.lossSum[:], collective.Sum, p.lossGroup); err != nil {
				return 0, fmt.Errorf("loss: %w", err)
			}
			loss = float64(p.lossSum[0])
		}
	}
	if err := n.backward(ctx, p); err != nil {
		return 0, err
	}
	if rides < 0 {
		err = n.reduceParams(ctx, -1, nil)
	} else {
		err = n.reduceParams(ctx, rides, &p.lossSum[0])
		loss = float64(p.lossSum[0])
	}
	if err != nil {
		return 0, err
	}
	if err := n.reduceScatter(ctx); err != nil {
		return 0, err
	}
	return float32(loss / float64(p.global)), nil
}

// labelsFor moves this rank's labels to the rows of the loss's slice.
func (n *Net) labelsFor(ctx context.Context, p *pass, labels []int32) ([]int32, error) {
	if p.labels.identity {
		return labels, nil
	}
	in, err := n.labelsIn(p, labels)
	if err != nil {
		return nil, err
	}
	out, err := p.labels.run(ctx, n.cfg.Comm, in)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	return n.labelsOut(p, out), nil
}

// labelsIn returns labels as the float32 tensor the labels' plan moves:
// class indices travel as float32, exact far beyond any class count.
func (n *Net) labelsIn(p *pass, labels []int32) (*tensor.Tensor, error) {
	if p.labelsIn == nil || p.labelsIn.Len() != len(labels) {
		var err error
		if p.labelsIn, err = tensor.New(len(labels)); err != nil {
			return nil, fmt.Errorf("labels: %w", err)
		}
	}
	for i, v := range labels {
		p.labelsIn.Data()[i] = float32(v)
	}
	return p.labelsIn, nil
}

// labelsOut returns the moved labels as class indices.
func (n *Net) labelsOut(p *pass, out *tensor.Tensor) []int32 {
	p.labelsOut = p.labelsOut[:0]
	for _, v := range out.Data() {
		p.labelsOut = append(p.labelsOut, int32(v))
	}
	return p.labelsOut
}

// backward runs the loss's backward and every operator's back to the first
// with parameters, reducing partial input gradients on the way.
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
	_, err := n.runBack(ctx, p, n.loss.backward(inv), len(n.stages)-2, n.firstParam)
	return err
}

// runBack runs operators hi down to lo backward from d, the gradient of
// operator hi+1's input in its layout (the loss's for the last operator),
// reducing partial input gradients on the way, and returns the gradient of
// operator lo's input (nil when lo is the first operator with parameters,
// whose input gradient nothing needs).
func (n *Net) runBack(ctx context.Context, p *pass, d *tensor.Tensor, hi, lo int) (*tensor.Tensor, error) {
	for i := hi; i >= lo; i-- {
		st := n.stages[i]
		name := st.def.spec.Name
		dy, err := p.bwd[i].run(ctx, n.cfg.Comm, d)
		if err != nil {
			return nil, fmt.Errorf("gradient of operator %s: %w", name, err)
		}
		if st.def.spec.Kind == parallel.OpAllReduce {
			d = dy // the gradient of a sum passes to every summand
			continue
		}
		if d, err = st.layer.Backward(dy); err != nil {
			return nil, err
		}
		if i == n.firstParam {
			continue
		}
		if g := p.gradGroup[i]; g != nil {
			if err := n.cfg.Comm.GroupAllReduce(ctx, d.Data(), collective.Sum, g); err != nil {
				return nil, fmt.Errorf("input gradient of operator %s: %w", name, err)
			}
		}
		if h := p.halo[i]; h != nil {
			// The halo's gradient goes back to the ranks that own
			// those rows and columns, added to theirs.
			if d, err = h.run(ctx, n.cfg.Comm, d); err != nil {
				return nil, fmt.Errorf("input gradient of operator %s: %w", name, err)
			}
		}
	}
	return d, nil
}

// Predict returns the logits [rows classes] of x, this rank's batch as
// the data pipeline delivers it (the whole batch for a pipeline stage),
// with the moving statistics of BatchNorm. Under a dataset strategy x may
// also hold whole images: the rank keeps its window of them. Every rank
// calls it.
func (n *Net) Predict(ctx context.Context, x *tensor.Tensor) (*tensor.Tensor, error) {
	if c, h, w := n.window(); x.Rank() == 4 && x.Dim(0) > 0 && (c != imageChannels || h != imageSide || w != imageSide) &&
		x.Dim(1) == imageChannels && x.Dim(2) == imageSide && x.Dim(3) == imageSide {
		var err error
		if x, err = cutWindow(x, n.main.data, n.cfg.Rank); err != nil {
			return nil, err
		}
	}
	if err := n.checkInput(x); err != nil {
		return nil, err
	}
	if n.pipe != nil {
		return n.pipePredict(ctx, x)
	}
	p, err := n.passFor(x.Dim(0))
	if err != nil {
		return nil, err
	}
	if err := n.gatherWeights(ctx); err != nil {
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
