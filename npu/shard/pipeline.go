package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/npu/collective"
	"github.com/mspipe/mspipe/npu/nn"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/tensor"
)

// Link is a pipeline stage rank's point-to-point connection with the rank
// of the same local index in a neighbouring stage; a two-rank
// *collective.Comm has it.
type Link interface {
	// SendRecv sends send to the peer and receives recv from it, either
	// possibly empty; both ends call it in the same order with mirrored
	// lengths.
	SendRecv(ctx context.Context, send, recv []float32) error
}

// Pipeline makes a Net one stage of a pipeline (MindSpore's
// pipeline_stages): the model's chain of operators is cut into Stages
// contiguous ranges, each run by its own group of ranks (Config.Devices
// of them, Config.Comm their communicator, Config.Rank this rank's index
// in the group), and a step runs Micro micro-batches through the stages.
type Pipeline struct {
	Stages   int // K; 0 or 1: no pipeline
	Stage    int // this rank's stage, 0 ≤ Stage < Stages
	Micro    int // micro-batches per step (MindSpore's micro_size; 0: 1)
	Schedule Schedule
	// Assign maps operator names to stages (MindSpore's pipeline_stage of
	// a cell): an operator it does not name runs on the stage of the one
	// before it, the first operators on stage 0. Nil: the model's cut
	// balanced by parameter count (PipelineCuts).
	Assign map[string]int
	// Prev and Next link to the neighbouring stages (nil at the ends).
	Prev, Next Link
}

func (p Pipeline) on() bool { return p.Stages > 1 }

// StageSpan is the operators one pipeline stage runs: Ops[Lo:Hi] of the
// model's chain.
type StageSpan struct {
	Lo, Hi int
	First  string // the first operator's name
	Last   string // the last operator's name
	Params int64  // parameter elements
}

// PipelineCuts returns the operators where the named model can be cut into
// pipeline stages: every operator with parameters after the first one
// (a stage starts there; the input gradient of a stage's first operator
// goes back to the previous stage).
func PipelineCuts(model string) ([]string, error) {
	def, err := define(model, 1, DefaultClasses)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, i := range def.cuts() {
		names = append(names, def.ops[i].spec.Name)
	}
	return names, nil
}

func (m *modelDef) firstParam() int {
	return slices.IndexFunc(m.ops, func(o opDef) bool { return len(o.spec.Params()) > 0 })
}

// cuts returns the operator indices a default stage may start at.
func (m *modelDef) cuts() []int {
	var out []int
	first := m.firstParam()
	for i, o := range m.ops {
		if first >= 0 && i > first && len(o.spec.Params()) > 0 {
			out = append(out, i)
		}
	}
	return out
}

// PipelineStages returns the operators each of k stages of the named
// model runs: with assign, as it says; otherwise cut where the largest
// stage's parameter count is smallest.
func PipelineStages(model string, k int, assign map[string]int) ([]StageSpan, error) {
	def, err := define(model, 1, DefaultClasses)
	if err != nil {
		return nil, err
	}
	return def.stages(k, assign)
}

func (m *modelDef) stages(k int, assign map[string]int) ([]StageSpan, error) {
	if m.splitsItself() {
		return nil, fmt.Errorf("%w: %s splits itself (hybrid_parallel) and cannot be cut into pipeline stages", ErrConfig, m.name)
	}
	weight := make([]int64, len(m.ops)+1) // prefix sums of parameter elements
	for i, o := range m.ops {
		weight[i+1] = weight[i]
		for _, t := range o.spec.Params() {
			weight[i+1] += elems(t.Shape)
		}
	}
	var starts []int
	var err error
	if assign != nil {
		starts, err = m.assigned(k, assign)
	} else {
		starts, err = m.balanced(k, weight)
	}
	if err != nil {
		return nil, err
	}
	spans := make([]StageSpan, k)
	for s := range k {
		hi := len(m.ops)
		if s+1 < k {
			hi = starts[s+1]
		}
		lo := starts[s]
		spans[s] = StageSpan{Lo: lo, Hi: hi, First: m.ops[lo].spec.Name, Last: m.ops[hi-1].spec.Name, Params: weight[hi] - weight[lo]}
	}
	return spans, nil
}

// balanced picks k−1 of the model's cuts minimising the largest stage's
// parameter count (the first such choice), by dynamic programming.
func (m *modelDef) balanced(k int, weight []int64) ([]int, error) {
	cuts := m.cuts()
	if k-1 > len(cuts) {
		var names []string
		for _, c := range cuts {
			names = append(names, m.ops[c].spec.Name)
		}
		return nil, fmt.Errorf("%w: %s can be cut into at most %d pipeline stages (before %s), not %d", ErrConfig, m.name, len(cuts)+1, strings.Join(names, ", "), k)
	}
	// pos[0] = 0 and the cuts: best[j][c] is the smallest largest stage of
	// j+1 stages covering ops[0:pos[c]].
	pos := append([]int{0}, cuts...)
	n := len(m.ops)
	const inf = int64(1) << 62
	best := make([][]int64, k)
	from := make([][]int, k)
	for j := range k {
		best[j] = make([]int64, len(pos)+1)
		from[j] = make([]int, len(pos)+1)
		for c := range best[j] {
			best[j][c] = inf
		}
	}
	end := func(c int) int { // ops[0:end(c)]; c = len(pos) is the whole chain
		if c == len(pos) {
			return n
		}
		return pos[c]
	}
	for c := 1; c <= len(pos); c++ {
		best[0][c] = weight[end(c)]
	}
	for j := 1; j < k; j++ {
		for c := 1; c <= len(pos); c++ {
			for b := 1; b < c; b++ {
				v := max(best[j-1][b], weight[end(c)]-weight[pos[b]])
				if v < best[j][c] {
					best[j][c], from[j][c] = v, b
				}
			}
		}
	}
	starts := make([]int, k)
	c := len(pos)
	for j := k - 1; j > 0; j-- {
		c = from[j][c]
		starts[j] = pos[c]
	}
	return starts, nil
}

// assigned turns a pipeline_stage map into stage starts.
func (m *modelDef) assigned(k int, assign map[string]int) ([]int, error) {
	index := map[string]int{}
	for i, o := range m.ops {
		index[o.spec.Name] = i
	}
	for _, name := range slices.Sorted(maps.Keys(assign)) {
		if _, ok := index[name]; !ok {
			var all []string
			for _, o := range m.ops {
				all = append(all, o.spec.Name)
			}
			return nil, fmt.Errorf("%w: pipeline_stage names %q, not an operator of %s (%s)", ErrConfig, name, m.name, strings.Join(all, ", "))
		}
		if s := assign[name]; s < 0 || s >= k {
			return nil, fmt.Errorf("%w: pipeline_stage %s: stage %d, want 0 to %d", ErrConfig, name, s, k-1)
		}
	}
	starts := make([]int, k)
	for j := range starts {
		starts[j] = -1
	}
	starts[0] = 0
	cur := 0
	first := m.firstParam()
	for i, o := range m.ops {
		s, ok := assign[o.spec.Name]
		if !ok || s == cur {
			continue
		}
		if s < cur {
			return nil, fmt.Errorf("%w: pipeline_stage %s: stage %d after stage %d; stages must follow the operators' order", ErrConfig, o.spec.Name, s, cur)
		}
		if s != cur+1 {
			return nil, fmt.Errorf("%w: pipeline_stage %s: stage %d follows stage %d, leaving stage %d empty", ErrConfig, o.spec.Name, s, cur, cur+1)
		}
		if i <= first {
			return nil, fmt.Errorf("%w: pipeline_stage %s: a stage cannot start before or at the first operator with parameters (%s)", ErrConfig, o.spec.Name, m.ops[first].spec.Name)
		}
		starts[s], cur = i, s
	}
	if cur != k-1 {
		return nil, fmt.Errorf("%w: pipeline_stage puts no operator on stage %d of %d", ErrConfig, cur+1, k)
	}
	return starts, nil
}

// stageSpan is the operators of the configured pipeline stage (the whole
// chain without stages): what New builds and LayoutOf lays out.
func (c *Config) stageSpan(def *modelDef) (StageSpan, error) {
	if !c.Pipeline.on() {
		return StageSpan{Lo: 0, Hi: len(def.ops)}, nil
	}
	spans, err := def.stages(c.Pipeline.Stages, c.Pipeline.Assign)
	if err != nil {
		return StageSpan{}, err
	}
	return spans[c.Pipeline.Stage], nil
}

// pipeState is a pipeline stage's part of a step.
type pipeState struct {
	cfg    Pipeline
	micro  int
	span   StageSpan
	prog   []step
	acts   []*tensor.Tensor // the received input of each micro-batch (stages after the first)
	gradIn []float32        // the next stage's gradient and, last, the micro-batch's loss sum
	dIn    *tensor.Tensor   // gradIn without the loss, shaped
	// gradOut is this stage's input gradient and the loss sum, for the
	// previous stage.
	gradOut []float32
	losses  []float32 // each micro-batch's loss sum
	train   []*nn.Param
	acc     [][]float32 // the gradients summed over the micro-batches
	frozen  []*nn.Param // non-trainable (BatchNorm statistics)
	saved   [][]float32
}

// opRange is the operators this rank builds and runs.
func (n *Net) opRange() (lo, hi int) {
	if n.pipe == nil {
		return 0, len(n.def.ops)
	}
	return n.pipe.span.Lo, n.pipe.span.Hi
}

// checkPipeline checks the pipeline part of a Config.
func (c *Config) checkPipeline() error {
	if err := c.checkStageLayout(); err != nil {
		return err
	}
	p := c.Pipeline
	switch {
	case !p.on():
		if p.Micro > 1 || p.Prev != nil || p.Next != nil || p.Assign != nil {
			return fmt.Errorf("%w: micro-batches, links or a stage assignment without pipeline stages", ErrConfig)
		}
	case (p.Prev == nil) != (p.Stage == 0) || (p.Next == nil) != (p.Stage == p.Stages-1):
		return fmt.Errorf("%w: pipeline stage %d of %d needs a link to each neighbouring stage and no other", ErrConfig, p.Stage, p.Stages)
	}
	return nil
}

// checkStageLayout checks what lays a pipeline stage out (New and
// LayoutOf): the stage, the mode, the micro-batches; not the links, which
// only New needs.
func (c *Config) checkStageLayout() error {
	p := c.Pipeline
	switch {
	case p.Stages < 0 || p.Micro < 0:
		return fmt.Errorf("%w: %d pipeline stages, %d micro-batches", ErrConfig, p.Stages, p.Micro)
	case !p.on():
		return nil
	case p.Stage < 0 || p.Stage >= p.Stages:
		return fmt.Errorf("%w: pipeline stage %d of %d", ErrConfig, p.Stage, p.Stages)
	case c.Mode == parallel.HybridParallel || c.Mode == parallel.StandAlone:
		return fmt.Errorf("%w: pipeline stages in mode %s (want semi_auto_parallel, auto_parallel or data_parallel)", ErrConfig, c.Mode)
	}
	if c.DatasetStrategy != nil {
		return fmt.Errorf("%w: a dataset_strategy with pipeline stages is not supported yet", ErrConfig)
	}
	micro := max(p.Micro, 1)
	if global := c.globalBatch(c.BatchPerDevice); global%micro != 0 {
		return fmt.Errorf("%w: a global batch of %d does not split into %d micro-batches", ErrConfig, global, micro)
	}
	return nil
}

// buildPipe prepares the pipeline buffers and reserves them on the
// device, once the layers and the main pass exist.
func (n *Net) buildPipe() error {
	pp := n.pipe
	layouts := n.main.layouts
	var bytes int64
	if pp.span.Lo > 0 {
		shape, err := layouts[pp.span.Lo-1].Output.SliceShape()
		if err != nil {
			return err
		}
		for range pp.micro {
			t, err := tensor.New(shape...)
			if err != nil {
				return err
			}
			pp.acts = append(pp.acts, t)
			bytes += 4 * int64(t.Len())
		}
		in, err := layouts[pp.span.Lo].Inputs[0].SliceShape()
		if err != nil {
			return err
		}
		pp.gradOut = make([]float32, volume(in)+1)
	}
	if pp.span.Hi < len(n.stages) {
		shape, err := layouts[pp.span.Hi].Inputs[0].SliceShape()
		if err != nil {
			return err
		}
		pp.gradIn = make([]float32, volume(shape)+1)
		if pp.dIn, err = tensor.FromSlice(pp.gradIn[:volume(shape)], shape...); err != nil {
			return err
		}
	}
	bytes += 4 * int64(len(pp.gradIn)+len(pp.gradOut))
	if err := n.dev.Reserve(fmt.Sprintf("pipeline stage inputs (%d micro-batches)", pp.micro), bytes); err != nil {
		return err
	}
	var acc, saved int64
	for _, p := range n.params {
		if p.Trainable {
			pp.train = append(pp.train, p)
			if pp.micro > 1 {
				pp.acc = append(pp.acc, make([]float32, p.Value.Len()))
				acc += int64(p.Value.Len())
			}
		} else {
			pp.frozen = append(pp.frozen, p)
			pp.saved = append(pp.saved, make([]float32, p.Value.Len()))
			saved += int64(p.Value.Len())
		}
	}
	pp.losses = make([]float32, pp.micro)
	if err := n.dev.Reserve("accumulated gradients", 4*acc); err != nil {
		return err
	}
	return n.dev.Reserve("statistics saved over recomputation", 4*saved)
}

// pipeStep is TrainStep for a pipeline stage: x and labels are the whole
// global batch. It runs the stage's program over the micro-batches,
// summing their gradients, then reduces them within the stage group.
func (n *Net) pipeStep(ctx context.Context, x *tensor.Tensor, labels []int32) (float32, error) {
	pp := n.pipe
	rows := x.Dim(0)
	if rows != n.main.global*pp.micro {
		return 0, fmt.Errorf("%s pipeline stage %d: a batch of %d images, the job's global batch is %d: %w", n.cfg.Model, pp.cfg.Stage, rows, n.main.global*pp.micro, tensor.ErrShape)
	}
	p := n.main
	per := p.global
	image := x.Len() / rows
	last := len(n.stages) - 1
	isLast := pp.span.Hi == len(n.stages)
	// Every micro-batch's loss is a sum over its rows: its gradient scale
	// is that of the global batch's mean.
	scale := 1 / float64(rows)
	if !n.cfg.GradientsMean {
		scale = float64(n.cfg.Devices) / float64(rows)
	}
	held := -1 // the micro-batch whose activations the layers hold
	var out *tensor.Tensor
	forward := func(i int) error {
		in := x
		if pp.span.Lo > 0 {
			in = pp.acts[i]
		} else {
			var err error
			if in, err = tensor.FromSlice(x.Data()[i*per*image:(i+1)*per*image], append([]int{per}, x.Shape()[1:]...)...); err != nil {
				return err
			}
		}
		y, err := n.runOps(ctx, p, in, pp.span.Lo, min(pp.span.Hi, last), true)
		if err != nil {
			return err
		}
		out, held = y, i
		if !isLast {
			return nil
		}
		lossIn, err := p.fwd[last].run(ctx, n.cfg.Comm, y)
		if err != nil {
			return fmt.Errorf("into the loss: %w", err)
		}
		lab, err := n.labelsFor(ctx, p, labels[i*per:(i+1)*per])
		if err != nil {
			return err
		}
		sum, err := n.loss.forward(lossIn, lab)
		if err != nil {
			return err
		}
		pp.losses[i] = float32(sum)
		if p.lossGroup != nil {
			p.lossSum[0] = float32(sum)
			if err := n.cfg.Comm.GroupAllReduce(ctx, p.lossSum[:], collective.Sum, p.lossGroup); err != nil {
				return fmt.Errorf("loss: %w", err)
			}
			pp.losses[i] = p.lossSum[0]
		}
		return nil
	}
	backward := func(i int) error {
		if held != i {
			// Recompute the micro-batch's forward (its activations were
			// overwritten by later ones), keeping the statistics its first
			// forward left: a forward updates them once per micro-batch.
			for k, q := range pp.frozen {
				copy(pp.saved[k], q.Value.Data())
			}
			if err := forward(i); err != nil {
				return err
			}
			for k, q := range pp.frozen {
				copy(q.Value.Data(), pp.saved[k])
			}
		}
		held = -1
		d, from := pp.dIn, pp.span.Hi-1
		if isLast {
			d, from = n.loss.backward(scale), last-1
		}
		d, err := n.runBack(ctx, p, d, from, max(pp.span.Lo, n.firstParam))
		if err != nil {
			return err
		}
		if pp.micro > 1 {
			for k, q := range pp.train {
				if i == 0 {
					copy(pp.acc[k], q.Grad.Data())
					continue
				}
				for j, v := range q.Grad.Data() {
					pp.acc[k][j] += v
				}
			}
		}
		if pp.span.Lo > 0 {
			copy(pp.gradOut, d.Data())
			pp.gradOut[len(pp.gradOut)-1] = pp.losses[i]
		}
		return nil
	}
	for _, st := range pp.prog {
		var err error
		switch st.kind {
		case stepForward:
			err = forward(st.micro)
		case stepBackward:
			err = backward(st.micro)
		case stepPrev:
			var send, recv []float32
			if st.send >= 0 {
				send = pp.gradOut
			}
			if st.recv >= 0 {
				recv = pp.acts[st.recv].Data()
			}
			if err = pp.cfg.Prev.SendRecv(ctx, send, recv); err != nil {
				err = fmt.Errorf("pipeline: with stage %d: %w", pp.cfg.Stage-1, err)
			}
		case stepNext:
			var send, recv []float32
			if st.send >= 0 {
				send = out.Data()
			}
			if st.recv >= 0 {
				recv = pp.gradIn
			}
			if err = pp.cfg.Next.SendRecv(ctx, send, recv); err != nil {
				err = fmt.Errorf("pipeline: with stage %d: %w", pp.cfg.Stage+1, err)
			} else if st.recv >= 0 {
				pp.losses[st.recv] = pp.gradIn[len(pp.gradIn)-1]
			}
		}
		if err != nil {
			return 0, err
		}
	}
	for k, q := range pp.acc {
		copy(pp.train[k].Grad.Data(), q)
	}
	if err := n.reduceParams(ctx, -1, nil); err != nil {
		return 0, err
	}
	var total float64
	for _, l := range pp.losses {
		total += float64(l)
	}
	return float32(total / float64(rows)), nil
}

// pipePredict is Predict for a pipeline stage: x, the whole batch, runs
// through the stages in one piece (no micro-batches: nothing to
// accumulate), and the last stage's whole logits travel back to every
// stage, so every rank returns them.
func (n *Net) pipePredict(ctx context.Context, x *tensor.Tensor) (*tensor.Tensor, error) {
	pp := n.pipe
	p, err := n.passFor(x.Dim(0))
	if err != nil {
		return nil, err
	}
	last := len(n.stages) - 1
	in := x
	if pp.span.Lo > 0 {
		shape, err := p.layouts[pp.span.Lo-1].Output.SliceShape()
		if err != nil {
			return nil, err
		}
		if in, err = tensor.New(shape...); err != nil {
			return nil, err
		}
		if err := pp.cfg.Prev.SendRecv(ctx, nil, in.Data()); err != nil {
			return nil, fmt.Errorf("pipeline: with stage %d: %w", pp.cfg.Stage-1, err)
		}
	}
	y, err := n.runOps(ctx, p, in, pp.span.Lo, min(pp.span.Hi, last), false)
	if err != nil {
		return nil, err
	}
	out, err := tensor.New(x.Dim(0), p.layouts[last].Inputs[0].Shape[1])
	if err != nil {
		return nil, err
	}
	if pp.span.Hi <= last {
		// Activations on, then the logits back, in two exchanges: the
		// next stage computes in between.
		if err := pp.cfg.Next.SendRecv(ctx, y.Data(), nil); err != nil {
			return nil, fmt.Errorf("pipeline: with stage %d: %w", pp.cfg.Stage+1, err)
		}
		if err := pp.cfg.Next.SendRecv(ctx, nil, out.Data()); err != nil {
			return nil, fmt.Errorf("pipeline: with stage %d: %w", pp.cfg.Stage+1, err)
		}
	} else {
		logits, err := p.logits.run(ctx, n.cfg.Comm, y)
		if err != nil {
			return nil, fmt.Errorf("logits: %w", err)
		}
		copy(out.Data(), logits.Data())
	}
	if pp.span.Lo > 0 {
		if err := pp.cfg.Prev.SendRecv(ctx, out.Data(), nil); err != nil {
			return nil, fmt.Errorf("pipeline: with stage %d: %w", pp.cfg.Stage-1, err)
		}
	}
	return out, nil
}
