package reshard

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"

	"github.com/mspipe/mspipe/internal/bytesize"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// DefaultMaxMemory is the memory cap when Options.MaxMemory is 0.
const DefaultMaxMemory = 512 << 20

// Values of Options.VerifyOutput.
const (
	VerifyOutputCRC    = "crc"
	VerifyOutputSHA256 = "sha256"
)

// maxBandBytes bounds a band whatever the cap allows: a band this small
// stays in the CPU caches between being read, hashed and written, and the
// arena is paged in quickly; larger bands only cost page faults.
var maxBandBytes int64 = 4 << 20

// Options tune Plan, Run, Merge and Verify. The zero value works.
type Options struct {
	// MaxMemory caps the tensor data the engine buffers at once (bands,
	// write buffers), in bytes; 0 means DefaultMaxMemory. A plan that cannot
	// run under it is refused with ErrMemory.
	MaxMemory int64
	// Workers is how many reads and writes run in parallel; 0 means
	// GOMAXPROCS.
	Workers int
	// ReplicatedRule picks the value of a replicated tensor whose copies
	// differ: RuleRank0 (default) or RuleMean.
	ReplicatedRule string
	// VerifyCRC reads every source file once to check its crc_num trailer
	// before using it.
	VerifyCRC bool
	// VerifyOutput says how Run proves the files it wrote before writing
	// the manifest: VerifyOutputCRC (default) re-reads every file and
	// checks its size, its framing and the CRC-32 computed while writing;
	// VerifyOutputSHA256 also reassembles every tensor and checks its
	// content hash, as Verify does.
	VerifyOutput string
	// CRC appends MindSpore's crc_num trailer to every output file
	// (save_checkpoint's crc_check). Off, as in MindSpore, the files are
	// plain protobuf; the manifest's crc32 proves them either way.
	CRC bool
	// SliceBytes is the output's Value slice limit; 0 means
	// ckpt.DefaultSliceBytes, as MindSpore writes.
	SliceBytes int64
	// Progress, when set, is called by Run from one goroutine after each
	// band with the output bytes written so far and the total the plan
	// expects (PlanResult.WriteBytes); the last call has written == total.
	Progress func(written, total int64)
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxMemory == 0 {
		o.MaxMemory = DefaultMaxMemory
	}
	if o.MaxMemory < 0 {
		return o, fmt.Errorf("max memory %d: must be positive", o.MaxMemory)
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	switch o.ReplicatedRule {
	case "":
		o.ReplicatedRule = RuleRank0
	case RuleRank0, RuleMean:
	default:
		return o, fmt.Errorf("replicated rule %q: want %q or %q", o.ReplicatedRule, RuleRank0, RuleMean)
	}
	switch o.VerifyOutput {
	case "":
		o.VerifyOutput = VerifyOutputCRC
	case VerifyOutputCRC, VerifyOutputSHA256:
	default:
		return o, fmt.Errorf("output check %q: want %q or %q", o.VerifyOutput, VerifyOutputCRC, VerifyOutputSHA256)
	}
	if o.SliceBytes == 0 {
		o.SliceBytes = ckpt.DefaultSliceBytes
	}
	if o.SliceBytes < 0 {
		return o, fmt.Errorf("slice limit %d: must be positive", o.SliceBytes)
	}
	return o, nil
}

// PlanResult is what a run would do: per tensor moves, the bytes read and
// written, and the memory it needs.
type PlanResult struct {
	SourceRanks, TargetRanks int
	Files                    []string // output files relative to the output directory, rank order
	FileBytes                []int64  // each output file's exact size
	Tensors                  []TensorPlan
	SourceBytes              int64 // the source files' sizes, together
	ReadBytes                int64 // source tensor data read
	WriteBytes               int64 // output file bytes written
	PeakMemory               int64 // tensor data buffered at most
	MaxMemory                int64 // the cap it was planned for

	writeBuffer int   // per output file
	arena       int64 // bands and scatter buffer, allocated once per run
	mean        bool  // some tensor uses the mean rule's buffers
}

// TensorPlan is one tensor's part of a plan.
type TensorPlan struct {
	Name, DType string
	Shape       []int
	Bytes       int64  // the whole tensor's data
	Rule        string // "split" for a placed tensor, else the replicated rule
	BandRows    int    // rows along dim 0 per band
	Bands       int
	ReadBytes   int64
	WriteBytes  int64 // data bytes written to all ranks
	Moves       []Move
}

// Move is the part of a tensor one target rank gets from one source rank.
type Move struct {
	From, To int
	Box      parallel.Box
	Bytes    int64
}

// RuleSplit names the handling of a tensor with a placement.
const RuleSplit = "split"

// sources are the opened, indexed source files.
type sources struct {
	paths []string
	files []*os.File
	index []*ckpt.Index
}

func (s *sources) close() {
	for _, f := range s.files {
		if f != nil {
			f.Close()
		}
	}
}

// openSources opens and indexes every file, refusing missing, special or
// duplicated files, in parallel.
func openSources(ctx context.Context, paths []string, opt Options) (*sources, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("no source files: %w", ErrSource)
	}
	s := &sources{paths: paths, files: make([]*os.File, len(paths)), index: make([]*ckpt.Index, len(paths))}
	infos := make([]os.FileInfo, len(paths))
	err := forEach(ctx, len(paths), opt.Workers, func(r int) error {
		f, info, err := userfile.Open(paths[r])
		if err != nil {
			return fmt.Errorf("rank %d: open %s: %w", r, paths[r], err)
		}
		s.files[r], infos[r] = f, info
		if opt.VerifyCRC {
			if err := ckpt.CheckCRC(paths[r], f, info.Size()); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
		x, err := ckpt.IndexReader(paths[r], f, info.Size())
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		s.index[r] = x
		return nil
	})
	if err != nil {
		s.close()
		return nil, err
	}
	for r := range infos {
		for q := range r {
			if os.SameFile(infos[q], infos[r]) {
				s.close()
				return nil, fmt.Errorf("ranks %d and %d are the same file (%s, %s): %w", q, r, paths[q], paths[r], ErrSource)
			}
		}
	}
	return s, nil
}

// piece is a source box to read a tensor from.
type piece struct {
	rank int
	box  parallel.Box
	t    *ckpt.IndexedTensor
}

// job is one tensor's resolved work.
type job struct {
	name, dtype string
	elem        int
	shape       []int // the logical shape (empty for a scalar)
	rule        string
	reads       []piece        // distinct source boxes (split, rank0) or every rank's whole copy (mean)
	copies      []piece        // the other ranks' copies of a replicated tensor, compared with rank 0's
	dst         []parallel.Box // per target rank, in geometry form
	dstShapes   [][]int        // per target rank, the shape recorded in its file
	held        []bool         // per target rank, whether its file gets the tensor; nil: all do
	bandRows    int
	rowBytes    int64
	rowCost     int64 // memory per band row
}

// holds reports whether target rank r's file gets the tensor.
func (j *job) holds(r int) bool { return j.held == nil || j.held[r] }

// TensorOrder is the order of the output's tensors (the order Run
// writes them in): every rank's tensors
// in that rank's order. A tensor only later ranks hold (a later pipeline
// stage's) goes before the first tensor after it in its rank's file that
// an earlier rank holds, so that each output rank holding the same
// tensors as a source rank writes them in the same order.
func TensorOrder(index []*ckpt.Index) []string {
	var order []string
	known := map[string]bool{}
	for _, x := range index {
		var pending []string
		for _, t := range x.Tensors {
			if !known[t.Name] {
				known[t.Name] = true
				pending = append(pending, t.Name)
				continue
			}
			if len(pending) > 0 {
				at := slices.Index(order, t.Name)
				order = slices.Insert(order, at, pending...)
				pending = nil
			}
		}
		order = append(order, pending...)
	}
	return order
}

// geom returns the shape used for band geometry: a scalar is one row of
// one element.
func geom(shape []int) []int {
	if len(shape) == 0 {
		return []int{1}
	}
	return shape
}

func geomBox(b parallel.Box) parallel.Box {
	if len(b.Shape) == 0 {
		return parallel.Box{Offset: []int{0}, Shape: []int{1}}
	}
	return b
}

func intShape(dims []int64) []int {
	s := make([]int, len(dims))
	for i, d := range dims {
		s[i] = int(d)
	}
	return s
}

// resolve matches the source files with the placements and the target,
// and plans bands under the memory cap.
func resolve(s *sources, src Source, target Target, opt Options) ([]*job, *PlanResult, error) {
	n := len(s.paths)
	if err := CheckRanks(target.Ranks); err != nil {
		return nil, nil, err
	}
	files := target.Files
	if len(files) == 0 {
		files = make([]string, target.Ranks)
		for r := range files {
			files[r] = fmt.Sprintf("rank_%d.ckpt", r)
		}
	}
	if len(files) != target.Ranks {
		return nil, nil, fmt.Errorf("target names %d files for %d ranks", len(files), target.Ranks)
	}
	for name, p := range src.Placements {
		if p.Boxes != nil && len(p.Boxes) != n {
			return nil, nil, fmt.Errorf("tensor %q: placement has %d boxes for %d source files: %w", name, len(p.Boxes), n, ErrPlacement)
		}
		if err := p.checkRanks(n); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: source %w", name, err)
		}
	}
	for name, p := range target.Placements {
		if p.Boxes != nil && len(p.Boxes) != target.Ranks {
			return nil, nil, fmt.Errorf("tensor %q: target placement has %d boxes for %d ranks: %w", name, len(p.Boxes), target.Ranks, ErrPlacement)
		}
		if err := p.checkRanks(target.Ranks); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: target %w", name, err)
		}
	}
	byName := make([]map[string]*ckpt.IndexedTensor, n)
	for r, x := range s.index {
		byName[r] = make(map[string]*ckpt.IndexedTensor, len(x.Tensors))
		for i := range x.Tensors {
			byName[r][x.Tensors[i].Name] = &x.Tensors[i]
		}
	}
	order := TensorOrder(s.index)
	// Every rank holds the tensors its placements give it, and no other:
	// all of them unless a placement lists its ranks (a pipeline stage's).
	for _, name := range order {
		p := placementOf(src.Placements, name)
		holder := -1
		for r := range n {
			_, has := byName[r][name]
			switch {
			case has && holder < 0:
				holder = r
			case has && !p.holds(r):
				return nil, nil, fmt.Errorf("%s (rank %d): holds tensor %q, which its placement gives to ranks %v only: %w", s.paths[r], r, name, clip(p.Ranks, 16), ErrSource)
			}
		}
		for _, r := range p.holders(n) {
			if _, has := byName[r][name]; !has {
				return nil, nil, fmt.Errorf("%s (rank %d): tensor %q of %s is missing: %w", s.paths[r], r, name, s.paths[holder], ErrSource)
			}
		}
	}
	for name := range src.Placements {
		if !slices.ContainsFunc(byName, func(m map[string]*ckpt.IndexedTensor) bool { _, ok := m[name]; return ok }) {
			return nil, nil, fmt.Errorf("tensor %q has a placement but is in no source file: %w", name, ErrPlacement)
		}
	}
	for name := range target.Placements {
		if !slices.ContainsFunc(byName, func(m map[string]*ckpt.IndexedTensor) bool { _, ok := m[name]; return ok }) {
			return nil, nil, fmt.Errorf("tensor %q has a target placement but is in no source file: %w", name, ErrPlacement)
		}
	}

	var jobs []*job
	for _, name := range order {
		j, err := resolveTensor(s, byName, name, src, target, opt)
		if err != nil {
			return nil, nil, err
		}
		jobs = append(jobs, j)
	}
	plan, err := planMemory(jobs, files, n, target.Ranks, opt)
	if err != nil {
		return nil, nil, err
	}
	for _, x := range s.index {
		plan.SourceBytes += x.Size
	}
	return jobs, plan, nil
}

func resolveTensor(s *sources, byName []map[string]*ckpt.IndexedTensor, name string, src Source, target Target, opt Options) (*job, error) {
	n := len(s.paths)
	p := placementOf(src.Placements, name)
	holders := p.holders(n)
	first := holders[0]
	t0 := byName[first][name]
	j := &job{name: name, dtype: t0.DType}
	j.elem, _ = ckpt.DTypeSize(t0.DType)
	for _, r := range holders {
		if t := byName[r][name]; t.DType != t0.DType {
			return nil, fmt.Errorf("%s (rank %d): tensor %q is %s, rank %d has %s: %w", s.paths[r], r, name, t.DType, first, t0.DType, ErrSource)
		}
	}
	if p.Boxes != nil {
		j.rule = RuleSplit
		j.shape = slices.Clone(p.Shape)
		distinct, err := checkTiling(p.Shape, p.Boxes, p.Ranks)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: source %w", name, err)
		}
		for _, r := range holders {
			if got := intShape(byName[r][name].Dims); !slices.Equal(got, p.Boxes[r].Shape) {
				return nil, fmt.Errorf("%s (rank %d): tensor %q has shape %v, its placement says box %v at %v of %v: %w", s.paths[r], r, name, got, p.Boxes[r].Shape, p.Boxes[r].Offset, p.Shape, ErrPlacement)
			}
		}
		for _, r := range distinct {
			j.reads = append(j.reads, piece{rank: r, box: geomBox(p.Boxes[r]), t: byName[r][name]})
		}
	} else {
		j.shape = intShape(t0.Dims)
		for _, r := range holders {
			if got := intShape(byName[r][name].Dims); !slices.Equal(got, j.shape) {
				return nil, fmt.Errorf("%s (rank %d): replicated tensor %q has shape %v, rank %d has %v (a split tensor needs a placement): %w", s.paths[r], r, name, got, first, j.shape, ErrPlacement)
			}
		}
		j.rule = opt.ReplicatedRule
		if j.rule == RuleMean && !ckpt.IsFloat(j.dtype) || len(holders) == 1 {
			j.rule = RuleRank0 // integers (global_step) and a single source have one value
		}
		if j.rule == RuleMean && j.dtype != ckpt.DTypeFloat32 && j.dtype != ckpt.DTypeFloat64 {
			return nil, fmt.Errorf("tensor %q: the mean rule supports Float32 and Float64, not %s", name, j.dtype)
		}
		whole := geomBox(wholeBox(j.shape))
		for _, r := range holders {
			switch {
			case r == first || j.rule == RuleMean:
				j.reads = append(j.reads, piece{rank: r, box: whole, t: byName[r][name]})
			case !PerRankStatistic(name):
				// Only statistics may differ between ranks; any other
				// replicated tensor is read from every rank and compared,
				// so a set missing its strategy file (or a damaged rank)
				// is not merged from the first holder's copy alone.
				j.copies = append(j.copies, piece{rank: r, box: whole, t: byName[r][name]})
			}
		}
	}
	tp := placementOf(target.Placements, name)
	if tp.Ranks != nil {
		j.held = make([]bool, target.Ranks)
		for _, r := range tp.Ranks {
			j.held[r] = true
		}
	}
	if tp.Boxes != nil {
		if !slices.Equal(tp.Shape, j.shape) {
			return nil, fmt.Errorf("tensor %q: target placement is for shape %v, the source holds %v: %w", name, tp.Shape, j.shape, ErrPlacement)
		}
		if _, err := checkTiling(tp.Shape, tp.Boxes, tp.Ranks); err != nil {
			return nil, fmt.Errorf("tensor %q: target %w", name, err)
		}
		for _, b := range tp.Boxes {
			j.dst = append(j.dst, geomBox(b))
			j.dstShapes = append(j.dstShapes, slices.Clone(b.Shape))
		}
		for r := range j.dst {
			if !j.holds(r) {
				j.dst[r], j.dstShapes[r] = parallel.Box{}, nil
			}
		}
	} else {
		for r := range target.Ranks {
			if !j.holds(r) {
				j.dst = append(j.dst, parallel.Box{})
				j.dstShapes = append(j.dstShapes, nil)
				continue
			}
			j.dst = append(j.dst, geomBox(wholeBox(j.shape)))
			j.dstShapes = append(j.dstShapes, slices.Clone(j.shape))
		}
	}
	g := geom(j.shape)
	j.rowBytes = volume(g[1:]) * int64(j.elem)
	j.rowCost = 2 * j.rowBytes // the band being written and the next one being read
	if j.rule != RuleMean && needsScratch(j.reads, g) || len(j.copies) > 0 {
		j.rowCost += j.rowBytes // to scatter pieces narrower than the tensor, or to compare copies
	}
	return j, nil
}

// writeBufferSize is each output file's write buffer under the cap: an
// eighth of the cap shared by the files, between 4 KiB and 1 MiB.
func writeBufferSize(maxMemory int64, files int) int {
	return int(min(max(maxMemory/(8*int64(files)), 4<<10), 1<<20))
}

// planMemory chooses every tensor's band rows so that the write buffers
// plus one band fit the cap, and fills in the plan.
func planMemory(jobs []*job, files []string, sourceRanks, targetRanks int, opt Options) (*PlanResult, error) {
	wbuf := int64(writeBufferSize(opt.MaxMemory, targetRanks)) * int64(targetRanks)
	left := opt.MaxMemory - wbuf
	mean := slices.ContainsFunc(jobs, func(j *job) bool { return j.rule == RuleMean })
	if mean {
		left -= meanBufferBytes
	}
	if left <= 0 {
		need := bytesize.Format(wbuf) + " of write buffers"
		if mean {
			need += " and " + bytesize.Format(meanBufferBytes) + " for the mean rule"
		}
		return nil, fmt.Errorf("%d output files need %s, the cap is %s: %w", targetRanks, need, bytesize.Format(opt.MaxMemory), ErrMemory)
	}
	plan := &PlanResult{SourceRanks: sourceRanks, TargetRanks: targetRanks, Files: files, FileBytes: make([]int64, targetRanks), MaxMemory: opt.MaxMemory}
	var band int64
	for _, j := range jobs {
		g := geom(j.shape)
		rows := g[0]
		switch {
		case volume(g) == 0:
			j.bandRows = max(rows, 1)
		case j.rowCost > left:
			return nil, fmt.Errorf("tensor %q: one row along dim 0 needs %s, %s is left under the cap after write buffers: %w", j.name, bytesize.Format(j.rowCost), bytesize.Format(left), ErrMemory)
		default:
			j.bandRows = int(min(int64(rows), left/j.rowCost, max(1, maxBandBytes/j.rowBytes)))
		}
		if volume(g) > 0 {
			band = max(band, int64(j.bandRows)*j.rowCost)
		}
		tp := TensorPlan{Name: j.name, DType: j.dtype, Shape: slices.Clone(j.shape), Bytes: volume(j.shape) * int64(j.elem), Rule: j.rule, BandRows: j.bandRows}
		if rows > 0 {
			tp.Bands = (rows + j.bandRows - 1) / j.bandRows
		}
		for _, p := range append(slices.Clip(j.reads), j.copies...) {
			tp.ReadBytes += volume(p.box.Shape) * int64(j.elem)
		}
		for r, d := range j.dst {
			if !j.holds(r) {
				continue
			}
			bytes := volume(d.Shape) * int64(j.elem)
			tp.WriteBytes += bytes
			plan.FileBytes[r] += encodedSize(j.name, j.dstShapes[r], j.dtype, bytes, opt.SliceBytes)
			for _, p := range j.reads {
				if common, ok := p.box.Intersect(d); ok {
					if len(j.shape) == 0 {
						common = wholeBox(nil)
					}
					tp.Moves = append(tp.Moves, Move{From: p.rank, To: r, Box: common, Bytes: volume(common.Shape) * int64(j.elem)})
				}
			}
		}
		plan.ReadBytes += tp.ReadBytes
		plan.Tensors = append(plan.Tensors, tp)
	}
	for r := range plan.FileBytes {
		if opt.CRC {
			plan.FileBytes[r] += int64(crcTrailerLen)
		}
		plan.WriteBytes += plan.FileBytes[r]
	}
	plan.writeBuffer, plan.arena, plan.mean = writeBufferSize(opt.MaxMemory, targetRanks), band, mean
	plan.PeakMemory = wbuf + band
	if mean {
		plan.PeakMemory += meanBufferBytes
	}
	return plan, nil
}

// SizeSummary says in one line what a plan reads and writes: bytes in
// (the source files) against bytes out (the files written), so that a
// layout that copies tensors to every rank shows as what it costs.
func SizeSummary(p *PlanResult) string {
	s := fmt.Sprintf("%s in (%s), %s out (%s)",
		bytesize.Format(p.SourceBytes), files(p.SourceRanks), bytesize.Format(p.WriteBytes), files(p.TargetRanks))
	if p.SourceBytes > 0 {
		s += fmt.Sprintf(", out/in %.2f", float64(p.WriteBytes)/float64(p.SourceBytes))
	}
	return s + fmt.Sprintf("; %s of tensor data read, peak memory %s of %s",
		bytesize.Format(p.ReadBytes), bytesize.Format(p.PeakMemory), bytesize.Format(p.MaxMemory))
}

func files(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

// Plan checks a reshard without writing anything: it opens and indexes the
// sources (reading only the files' framing, and with VerifyCRC every
// byte), matches them with the placements and the target, and returns what
// Run would do.
func Plan(ctx context.Context, src Source, target Target, opt Options) (*PlanResult, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	s, err := openSources(ctx, src.Files, opt)
	if err != nil {
		return nil, err
	}
	defer s.close()
	_, plan, err := resolve(s, src, target, opt)
	return plan, err
}

// forEach runs fn(0..n-1) on up to workers goroutines and returns the
// first error; it stops starting new calls after an error or when ctx is
// done.
func forEach(ctx context.Context, n, workers int, fn func(i int) error) error {
	return forEachWorker(ctx, n, workers, func(_, i int) error { return fn(i) })
}

// forEachWorker is forEach telling fn which worker (0..workers-1) runs it,
// so that a worker can own a share of a buffer.
func forEachWorker(ctx context.Context, n, workers int, fn func(worker, i int) error) error {
	if n == 0 {
		return ctx.Err()
	}
	workers = max(1, min(workers, n))
	var (
		mu    sync.Mutex
		next  int
		first error
		wg    sync.WaitGroup
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || next >= n {
			return 0, false
		}
		if err := ctx.Err(); err != nil {
			first = err
			return 0, false
		}
		i := next
		next++
		return i, true
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, ok := take()
				if !ok {
					return
				}
				if err := fn(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
