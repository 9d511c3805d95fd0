package ckptset

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/npu/trainer"
)

// Set is a checkpoint set ready for the reshard engine: its rank files, the
// whole shape of every tensor, and the engine's Source.
type Set struct {
	Source reshard.Source
	Names  []string         // tensors in rank 0's file order
	Shapes map[string][]int // whole shape of every tensor
	DTypes map[string]string
}

// ErrLayoutMismatch is wrapped when a strategy file has a layout for a
// tensor the set does not hold.
var ErrLayoutMismatch = errors.New("strategy file does not match the checkpoint")

// Open indexes the rank files (no tensor data is read) and lays the
// strategy file sf over the set: every tensor with a layout gets a
// placement whose whole shape is the one the layout records, or the first
// holder's slice times the layout's splits. sf nil means every tensor is
// replicated (a data-parallel set). The engine checks each rank's slices
// against the boxes when it runs.
//
// A pipeline-parallel set has K stages of sf.Devices() ranks each (ranks
// s*D to s*D+D-1 are stage s), and each rank's file holds only the
// tensors of its stage (and those every stage has, such as global_step).
// sf must then describe stages 0 to K-1 (a merged file, or the per-stage
// files merged by parallel.ReadStrategies). A tensor is found in the
// stage(s) whose ranks hold it, and every rank of such a stage must hold
// it; its layout's boxes repeat in each of those stages.
func Open(files []string, sf *parallel.StrategyFile) (*Set, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("checkpoint set: no rank files")
	}
	stageDevices, stages := len(files), 1
	if sf != nil {
		var err error
		if stageDevices, stages, err = pipelineShape(sf, len(files)); err != nil {
			return nil, err
		}
	}
	indexed := 1
	if stages > 1 {
		indexed = len(files)
	}
	s, idx, err := indexedSet(files, indexed)
	if err != nil {
		return nil, err
	}
	held := map[string]*ckpt.IndexedTensor{} // each tensor's entry in its first holder's file
	for _, x := range idx {
		for i := range x.Tensors {
			t := &x.Tensors[i]
			if _, ok := held[t.Name]; !ok {
				held[t.Name] = t
				s.Shapes[t.Name] = toInts(t.Dims)
				s.DTypes[t.Name] = t.DType
			}
		}
	}
	if sf == nil {
		return s, nil
	}
	ranks := map[string][]int{} // the holders of tensors only some stages hold
	if stages > 1 {
		var err error
		if ranks, err = stageHolders(files, idx, s.Names, stageDevices, stages, sf); err != nil {
			return nil, err
		}
	}
	for _, name := range sortedKeys(sf.Layouts) {
		l := sf.Layouts[name]
		t, ok := held[name]
		if !ok {
			// A layout for nothing is a strategy file of another network
			// (or a renamed parameter): using the rest of it would merge
			// with the wrong shapes.
			return nil, fmt.Errorf("strategy layout of %q: no such tensor in %s (%d tensors): %w", name, heldWhere(files, indexed), len(held), ErrLayoutMismatch)
		}
		whole, err := WholeShape(l, t.Dims)
		if err != nil {
			return nil, fmt.Errorf("strategy layout of %q: %w", name, err)
		}
		boxes, err := l.Boxes(whole)
		if err != nil {
			return nil, fmt.Errorf("strategy layout of %q for shape %v: %w", name, whole, err)
		}
		p := reshard.Placement{Shape: whole, Boxes: boxes, Ranks: ranks[name]}
		if stages > 1 {
			// The stage's boxes again for every stage: ranks of the stages
			// that do not hold the tensor have theirs ignored.
			p.Boxes = make([]parallel.Box, len(files))
			for r := range p.Boxes {
				p.Boxes[r] = boxes[r%stageDevices]
			}
		}
		s.Source.Placements[name] = p
		s.Shapes[name] = whole
	}
	for _, name := range s.Names {
		if _, placed := s.Source.Placements[name]; placed {
			continue
		}
		// Optimizer state without a layout of its own follows its
		// parameter in the engine; its whole shape does too.
		if p, ok := followedPlacement(s.Source.Placements, name); ok {
			s.Shapes[name] = slices.Clone(p.Shape)
			continue
		}
		if r, ok := ranks[name]; ok {
			s.Source.Placements[name] = reshard.Placement{Ranks: r} // replicated within its stage(s)
		}
	}
	return s, nil
}

// OpenWholeStages indexes the files of a pipeline set saved with
// integrated_save (FindStageLeads): file s holds the whole tensors of
// pipeline stage s (and those every stage has, such as global_step). sf,
// the strategy of every stage (merged), must describe stages 0 to K-1 for
// K files; its layouts only check the tensors' shapes, as every tensor is
// whole. A tensor only some stages hold is placed on those files' ranks.
func OpenWholeStages(files []string, sf *parallel.StrategyFile) (*Set, error) {
	k := len(files)
	if k < 2 || sf == nil {
		return nil, fmt.Errorf("checkpoint set: %d whole-stage files: a pipeline set saved by the first rank of each stage has 2 or more, and a strategy of every stage", k)
	}
	if got := sf.Stages(); len(got) != k || got[k-1] != k-1 {
		return nil, fmt.Errorf("checkpoint set of %d pipeline stages (the first rank of each saved its stage's whole tensors), but the strategy describes stages %v: give every stage's strategy file", k, got)
	}
	s, idx, err := indexedSet(files, k)
	if err != nil {
		return nil, err
	}
	held := map[string]*ckpt.IndexedTensor{}
	for _, x := range idx {
		for i := range x.Tensors {
			t := &x.Tensors[i]
			if _, ok := held[t.Name]; !ok {
				held[t.Name] = t
				s.Shapes[t.Name] = toInts(t.Dims)
				s.DTypes[t.Name] = t.DType
			}
		}
	}
	for _, name := range sortedKeys(sf.Layouts) {
		t, ok := held[name]
		if !ok {
			return nil, fmt.Errorf("strategy layout of %q: no such tensor in any of the %d whole-stage files: %w", name, k, ErrLayoutMismatch)
		}
		if l := sf.Layouts[name]; l.Shape != nil && !slices.Equal(l.Shape, toInts(t.Dims)) {
			return nil, fmt.Errorf("%q: the strategy records shape %v, the whole-stage checkpoint holds %v: %w", name, l.Shape, t.Dims, ErrLayoutMismatch)
		}
	}
	ranks, err := stageHolders(files, idx, s.Names, 1, k, sf)
	if err != nil {
		return nil, err
	}
	for name, r := range ranks {
		// Every tensor gets its own placement, moments too: whole on the
		// ranks of the stages that hold it.
		s.Source.Placements[name] = reshard.Placement{Ranks: r}
	}
	return s, nil
}

func heldWhere(files []string, indexed int) string {
	if indexed == 1 {
		return files[0]
	}
	return fmt.Sprintf("any of the %d rank files", indexed)
}

// pipelineShape returns the devices per stage and the number of stages of
// a set of n ranks the strategy sf describes: one stage of n devices, or K
// stages of sf.Devices() when sf describes stages 0 to K-1.
func pipelineShape(sf *parallel.StrategyFile, n int) (stageDevices, stages int, err error) {
	d := sf.Devices()
	described := sf.Stages()
	if d == n || d == 0 {
		if len(described) > 1 {
			return 0, 0, fmt.Errorf("the strategy describes pipeline stages %v of %d devices each, the set has %d ranks; a pipeline set has stages times devices ranks", described, d, n)
		}
		return n, 1, nil
	}
	if n%d != 0 || len(described) == 1 {
		hint := ""
		if n%d == 0 {
			hint = fmt.Sprintf(" (or %d pipeline stages of %d: give every stage's strategy file, or a directory of them; this one describes stage %d only)", n/d, d, described[0])
		}
		return 0, 0, fmt.Errorf("strategy file is for %d devices, the set has %d ranks%s", d, n, hint)
	}
	k := n / d
	want := make([]int, k)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(described, want) {
		return 0, 0, fmt.Errorf("the set has %d ranks, %d pipeline stages of the strategy's %d devices, but the strategy describes stages %v: give every stage's strategy file", n, k, d, described)
	}
	return d, k, nil
}

// stageHolders finds which stages hold each tensor of a pipeline set: a
// stage holds a tensor when all its ranks' files do, and a stage where some
// ranks hold it and others not is an error naming a rank without it. A
// stage the strategy (merged from per-stage files) gives a parameter to
// must hold it, and no other may. It returns the holding ranks of every
// tensor not every stage holds.
func stageHolders(files []string, idx []*ckpt.Index, names []string, d, k int, sf *parallel.StrategyFile) (map[string][]int, error) {
	has := make([]map[string]bool, len(idx))
	for r, x := range idx {
		has[r] = make(map[string]bool, len(x.Tensors))
		for _, t := range x.Tensors {
			has[r][t.Name] = true
		}
	}
	out := map[string][]int{}
	for _, name := range names {
		var stages []int
		for s := range k {
			count, with, without := 0, -1, -1
			for r := s * d; r < (s+1)*d; r++ {
				if has[r][name] {
					count, with = count+1, r
				} else {
					without = r
				}
			}
			switch count {
			case 0:
			case d:
				stages = append(stages, s)
			default:
				return nil, fmt.Errorf("%s (rank %d, pipeline stage %d): tensor %q is missing; rank %d of the same stage (%s) holds it", files[without], without, s, name, with, files[with])
			}
		}
		if want, ok := sf.ParamStages[name]; ok && !slices.Equal(want, stages) {
			return nil, fmt.Errorf("parameter %q: the strategy files put it in stages %v, the checkpoints of stages %v hold it: %w", name, want, stages, ErrLayoutMismatch)
		}
		if len(stages) == k {
			continue
		}
		var ranks []int
		for _, s := range stages {
			for r := s * d; r < (s+1)*d; r++ {
				ranks = append(ranks, r)
			}
		}
		out[name] = ranks
	}
	return out, nil
}

// optimizerPrefixes name optimizer state that follows its parameter's
// placement, as the engine's rule has it.
var optimizerPrefixes = []string{"moments.", "adam_m.", "adam_v.", "accum."}

// followedPlacement is the placement an optimizer moment follows.
func followedPlacement(placements map[string]reshard.Placement, name string) (reshard.Placement, bool) {
	for _, prefix := range optimizerPrefixes {
		if param, ok := strings.CutPrefix(name, prefix); ok {
			p, ok := placements[param]
			return p, ok
		}
	}
	return reshard.Placement{}, false
}

func indexFile(path string) (*ckpt.Index, error) {
	f, info, err := userfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	defer f.Close()
	return ckpt.IndexReader(path, f, info.Size())
}

// WholeShape returns the shape of the whole tensor a layout splits into
// slices of which rank 0 holds slice: the shape the layout records when it
// has one, else the slice times the splits of each dimension (the sum of
// param_split_shape for an uneven split of dimension 0; times
// opt_weight_shard_size for an optimizer-sharded one).
func WholeShape(l parallel.TensorLayout, slice []int64) ([]int, error) {
	if l.Shape != nil {
		return slices.Clone(l.Shape), nil
	}
	if len(slice) != len(l.TensorMap) {
		return nil, fmt.Errorf("tensor map %v has %d entries, rank 0 holds a tensor of %d dimensions %v", l.TensorMap, len(l.TensorMap), len(slice), slice)
	}
	whole := make([]int, len(slice))
	for k, d := range slice {
		n := 1
		if m := l.TensorMap[k]; m >= 0 && m < len(l.DeviceMatrix) {
			n = l.DeviceMatrix[len(l.DeviceMatrix)-1-m]
		}
		whole[k] = int(d) * n
	}
	switch {
	case len(l.ParamSplitShape) > 0:
		whole[0] = 0
		for _, s := range l.ParamSplitShape {
			whole[0] += s
		}
	case l.OptWeightShardStep > 0 && l.OptWeightShardSize > 0 && len(whole) > 0:
		whole[0] *= l.OptWeightShardSize
	}
	return whole, nil
}

// Target returns the target set for a target strategy file: every tensor
// it has a layout for is split as the layout says (its whole shape from
// the source), every other one replicated on the layout's devices.
//
// A strategy of K pipeline stages (the per-stage files of a pipeline job,
// merged by parallel.ReadStrategies) makes a target of K times its
// devices, each parameter only in the ranks of the stages whose files
// hold its layout. A merged file read back does not say which stage holds
// a parameter, so it is refused as a pipeline target.
func (s *Set) Target(sf *parallel.StrategyFile) (reshard.Target, error) {
	d := sf.Devices()
	t := reshard.Target{Ranks: d, Placements: map[string]reshard.Placement{}}
	if d < 1 {
		return t, fmt.Errorf("target strategy file has no layouts, so no device count")
	}
	stages := sf.Stages()
	k := len(stages)
	if k > 1 {
		if stages[k-1] != k-1 {
			return t, fmt.Errorf("target strategy describes pipeline stages %v: a pipeline's stages are 0 to K-1, give every stage's strategy file", stages)
		}
		if sf.ParamStages == nil {
			return t, fmt.Errorf("target strategy describes pipeline stages %v, but a merged strategy file does not say which stage holds each parameter: give the per-stage strategy files (or a directory of them) as the target", stages)
		}
		t.Ranks = d * k
		if err := reshard.CheckRanks(t.Ranks); err != nil {
			return t, err
		}
	}
	for _, name := range sortedKeys(sf.Layouts) {
		shape, ok := s.Shapes[name]
		if !ok {
			continue
		}
		boxes, err := sf.Layouts[name].Boxes(shape)
		if err != nil {
			return t, fmt.Errorf("target layout of %q for shape %v: %w", name, shape, err)
		}
		p := reshard.Placement{Shape: slices.Clone(shape), Boxes: boxes}
		if k > 1 {
			p.Boxes = make([]parallel.Box, t.Ranks)
			for r := range p.Boxes {
				p.Boxes[r] = boxes[r%d]
			}
			if in := sf.ParamStages[name]; len(in) < k {
				for _, st := range in {
					for r := st * d; r < (st+1)*d; r++ {
						p.Ranks = append(p.Ranks, r)
					}
				}
			}
		}
		t.Placements[name] = p
	}
	return t, nil
}

// StrategyForDevices returns the strategy file of the target npu/reshard's
// rule makes for m devices, as MindSpore writes one: a layout for every
// parameter, the rule's layout for a split one (reshard.LayoutsForDevices),
// tensor map all -1 on device matrix [m] for a replicated one; optimizer
// state and scalars have none.
func (s *Set) StrategyForDevices(m int) *parallel.StrategyFile {
	split := reshard.LayoutsForDevices(s.Source, m)
	sf := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{}}
	for _, name := range s.Names {
		if l, ok := split[name]; ok {
			sf.Layouts[name] = parallel.TensorLayout{DeviceMatrix: l.DeviceMatrix, TensorMap: l.TensorMap}
			continue
		}
		if isOptimizerState(name) || len(s.Shapes[name]) == 0 {
			continue
		}
		tmap := make([]int, len(s.Shapes[name]))
		for k := range tmap {
			tmap[k] = -1
		}
		sf.Layouts[name] = parallel.TensorLayout{DeviceMatrix: []int{m}, TensorMap: tmap}
	}
	return sf
}

func isOptimizerState(name string) bool {
	for _, prefix := range optimizerPrefixes {
		if strings.HasPrefix(name, prefix) && len(name) > len(prefix) {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func toInts(v []int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// Job is the next training a set is resharded for: what npu/train's
// model, mode, strategy, batch_size, full_batch, parallel_optimizer and
// optimizer_weight_shard_size say, on Devices devices.
type Job struct {
	Model          string
	Mode           parallel.Mode
	Strategy       parallel.Strategy
	Devices        int
	BatchPerDevice int // 0: npu/train's default
	FullBatch      bool
	// ParallelOptimizer: each rank of the job holds only its piece of the
	// parameters whose update the optimizer splits, and of their moments
	// (OptimizerShardSize pieces; 0: every rank that repeats the slice).
	ParallelOptimizer  bool
	OptimizerShardSize int
	// PipelineStages, MicroSize and PipelineStage are npu/train's
	// pipeline_stages, micro_size and pipeline_stage: with 2 or more
	// stages the job is cut into that many stages of Devices/PipelineStages
	// ranks each, rank r holding the parameters of stage r/(Devices/K).
	PipelineStages, MicroSize int
	PipelineStage             map[string]int
}

// TargetFor returns the target set and strategy file of job, its layout
// derived by npu/shard as the job's ranks derive theirs (shard.LayoutOf),
// so that the job starts from its own slices. auto_parallel is refused: its
// strategy is searched when the job starts.
func (s *Set) TargetFor(job Job) (reshard.Target, *parallel.StrategyFile, error) {
	if job.Mode == parallel.AutoParallel {
		return reshard.Target{}, nil, fmt.Errorf("auto_parallel searches its strategy when the job starts: run mspipe plan on it, then give the strategy it prints with mode semi_auto_parallel, there and here")
	}
	batch := job.BatchPerDevice
	if batch == 0 {
		batch = trainer.Defaults().BatchSize
	}
	cfg := shard.Config{Model: job.Model, Mode: job.Mode, Strategy: job.Strategy, Devices: job.Devices, BatchPerDevice: batch, FullBatch: job.FullBatch,
		ParallelOptimizer: job.ParallelOptimizer, OptimizerShardSize: job.OptimizerShardSize}
	if job.Mode.OneDevice() {
		cfg.Devices = 1
	}
	if job.PipelineStages > 1 {
		return s.pipelineTargetFor(job, cfg)
	}
	jl, err := shard.LayoutOf(cfg)
	if err != nil {
		return reshard.Target{}, nil, fmt.Errorf("the layout of %s in %s on %d devices: %w", job.Model, job.Mode, cfg.Devices, err)
	}
	t, sf, err := s.JobTarget(jl, cfg.Devices)
	if err != nil {
		return reshard.Target{}, nil, fmt.Errorf("%s in %s on %d devices: %w", job.Model, job.Mode, cfg.Devices, err)
	}
	return t, sf, nil
}

// pipelineTargetFor is TargetFor of a pipeline job: each stage's layout
// derived as its ranks derive theirs (shard.PipelineLayoutOf: the stage's
// group of Devices/K ranks, each receiving the global batch of
// BatchPerDevice·Devices/K images), and the target the stages' strategy
// files, merged, make (Target); the strategy file returned is that merge,
// what the job's stage writes as its strategy output.
func (s *Set) pipelineTargetFor(job Job, cfg shard.Config) (reshard.Target, *parallel.StrategyFile, error) {
	k := job.PipelineStages
	what := fmt.Sprintf("%s in %s on %d devices in %d pipeline stages", job.Model, job.Mode, job.Devices, k)
	if job.Devices%k != 0 {
		return reshard.Target{}, nil, fmt.Errorf("%s: the devices do not split into the stages", what)
	}
	per := job.Devices / k
	cfg.Devices, cfg.BatchPerDevice, cfg.FullBatch = per, cfg.BatchPerDevice*per, true
	cfg.Pipeline = shard.Pipeline{Stages: k, Micro: job.MicroSize, Assign: job.PipelineStage}
	stages, err := shard.PipelineLayoutOf(cfg)
	if err != nil {
		return reshard.Target{}, nil, fmt.Errorf("the layout of %s: %w", what, err)
	}
	named := make([]parallel.NamedStrategy, k)
	params := map[string]parallel.Layout{}
	for st, jl := range stages {
		named[st] = parallel.NamedStrategy{Name: fmt.Sprintf("stage %d", st), File: jl.StrategyFile()}
		maps.Copy(params, jl.Params)
	}
	if err := s.holdsParams(params); err != nil {
		return reshard.Target{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	sf, err := parallel.MergeStrategies(named)
	if err != nil {
		return reshard.Target{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	t, err := s.Target(sf)
	if err != nil {
		return reshard.Target{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	if t.Ranks != job.Devices {
		return reshard.Target{}, nil, fmt.Errorf("%s: the layout is for %d devices", what, t.Ranks)
	}
	return t, sf, nil
}

// JobTarget returns the target set of the job whose layout jl is (see
// shard.LayoutOf): every parameter split as the job's ranks hold it, its
// optimizer state following it, everything else replicated on devices
// ranks; and the strategy file such a job writes. The set must hold every
// parameter of the job with the shape the job's model gives it, so that a
// wrong model is found here and not when the job starts.
func (s *Set) JobTarget(jl *shard.JobLayout, devices int) (reshard.Target, *parallel.StrategyFile, error) {
	if err := s.holdsParams(jl.Params); err != nil {
		return reshard.Target{}, nil, err
	}
	sf := jl.StrategyFile()
	t, err := s.Target(sf)
	if err != nil {
		return reshard.Target{}, nil, err
	}
	if t.Ranks != devices {
		return reshard.Target{}, nil, fmt.Errorf("the job's layout is for %d devices, not %d", t.Ranks, devices)
	}
	return t, sf, nil
}

// holdsParams checks that the set holds every parameter of params with
// the shape its layout gives it.
func (s *Set) holdsParams(params map[string]parallel.Layout) error {
	var missing, differ []string
	for _, name := range sortedKeys(params) {
		want := params[name].Shape
		got, ok := s.Shapes[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case !slices.Equal(got, want):
			differ = append(differ, fmt.Sprintf("%s is %v, the model's is %v", name, got, want))
		}
	}
	if len(missing) > 0 || len(differ) > 0 {
		var why []string
		if len(missing) > 0 {
			why = append(why, fmt.Sprintf("%d of the model's parameters are not in it (%s)", len(missing), strings.Join(clipNames(missing), ", ")))
		}
		if len(differ) > 0 {
			why = append(why, strings.Join(clipNames(differ), "; "))
		}
		return fmt.Errorf("the checkpoint is not one of this model: %s", strings.Join(why, "; "))
	}
	return nil
}

func clipNames(names []string) []string {
	if len(names) > 5 {
		return append(names[:5:5], fmt.Sprintf("%d more", len(names)-5))
	}
	return names
}

// indexedSet indexes the first n of files and starts the Set over all of
// them, its tensor names in the files' order.
func indexedSet(files []string, n int) (*Set, []*ckpt.Index, error) {
	idx := make([]*ckpt.Index, n)
	for r := range idx {
		x, err := indexFile(files[r])
		if err != nil {
			return nil, nil, err
		}
		idx[r] = x
	}
	s := &Set{
		Source: reshard.Source{Files: slices.Clone(files), Placements: map[string]reshard.Placement{}},
		Shapes: map[string][]int{},
		DTypes: map[string]string{},
	}
	s.Names = reshard.TensorOrder(idx)
	return s, idx, nil
}
