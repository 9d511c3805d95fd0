package ckptset

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
)

// A jobLayout is how one training lays the model out: K pipeline stages
// of D devices each (K = 1 without pipeline), every parameter's stage(s)
// and its layout on its stage's devices (operator split and data
// parallelism in the device matrix, optimizer sharding in
// opt_weight_shard_step/size).
type jobLayout struct {
	stages, stageDevices int
	layouts              map[string]parallel.TensorLayout
	paramStages          map[string][]int
}

func (j jobLayout) devices() int { return j.stages * j.stageDevices }

func (j jobLayout) String() string {
	opt := 0
	for _, l := range j.layouts {
		if l.OptWeightShardSize > 1 {
			opt++
		}
	}
	return fmt.Sprintf("%d stages x %d devices, %d optimizer-sharded", j.stages, j.stageDevices, opt)
}

// pipelineModel is a model of four layers, an embedding the first and last
// stages share, Momentum moments for every weight, and scalars every rank
// holds. Every dimension is a multiple of 8, so any split of 8 devices
// divides it. Random bytes: a wrong element anywhere changes a hash.
func pipelineModel(rng *rand.Rand) []ckpt.Tensor {
	var model []ckpt.Tensor
	add := func(name string, shape []int64, dtype string) {
		elem, _ := ckpt.DTypeSize(dtype)
		n := int64(elem)
		for _, d := range shape {
			n *= d
		}
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		model = append(model, ckpt.Tensor{Name: name, Dims: shape, DType: dtype, Data: data})
	}
	dim := func() int64 { return int64(8 * (1 + rng.IntN(3))) }
	emb := []int64{dim(), dim()}
	add("embedding", emb, ckpt.DTypeFloat32)
	add("moments.embedding", emb, ckpt.DTypeFloat32)
	for i := range 4 {
		w := []int64{dim(), dim()}
		dtype := []string{ckpt.DTypeFloat32, ckpt.DTypeFloat16}[rng.IntN(2)]
		add(fmt.Sprintf("layer%d.weight", i), w, dtype)
		add(fmt.Sprintf("moments.layer%d.weight", i), w, dtype)
		add(fmt.Sprintf("layer%d.bias", i), []int64{dim()}, dtype)
	}
	add("learning_rate", nil, ckpt.DTypeFloat32)
	add("global_step", nil, ckpt.DTypeInt32)
	return model
}

func isParam(name string) bool {
	return name != "learning_rate" && name != "global_step" && !strings.HasPrefix(name, "moments.")
}

func divisorsOf(n int) []int {
	var ds []int
	for d := 1; d <= n; d++ {
		if n%d == 0 {
			ds = append(ds, d)
		}
	}
	return ds
}

// randomJobLayout lays model out on n devices in k stages: layer i in
// stage i*k/4, the embedding in the first and the last; each parameter
// on a device matrix [dp, mp] with a random tensor map and, when opt,
// optimizer sharding where the data-parallel ranks allow it.
func randomJobLayout(rng *rand.Rand, model []ckpt.Tensor, n, k int, opt bool) jobLayout {
	d := n / k
	j := jobLayout{stages: k, stageDevices: d, layouts: map[string]parallel.TensorLayout{}, paramStages: map[string][]int{}}
	for _, x := range model {
		if !isParam(x.Name) {
			continue
		}
		switch {
		case x.Name == "embedding" && k > 1:
			j.paramStages[x.Name] = []int{0, k - 1}
		case x.Name == "embedding":
			j.paramStages[x.Name] = []int{0}
		default:
			var layer int
			fmt.Sscanf(x.Name, "layer%d.", &layer)
			j.paramStages[x.Name] = []int{layer * k / 4}
		}
		ds := divisorsOf(d)
		mp := ds[rng.IntN(len(ds))]
		l := parallel.TensorLayout{DeviceMatrix: []int{d / mp, mp}}
		maps := [][]int{{-1, -1}, {0, -1}, {-1, 0}, {1, 0}, {0, 1}, {1, -1}, {-1, 1}}
		if len(x.Dims) == 1 {
			maps = [][]int{{-1}, {0}, {1}}
		}
		l.TensorMap = slices.Clone(maps[rng.IntN(len(maps))])
		if opt && rng.IntN(3) > 0 {
			step := 1
			for _, m := range l.TensorMap {
				if m >= 0 {
					step *= l.DeviceMatrix[len(l.DeviceMatrix)-1-m]
				}
			}
			if sizes := divisorsOf(d / step)[1:]; len(sizes) > 0 {
				l.OptWeightShardStep, l.OptWeightShardSize = step, sizes[rng.IntN(len(sizes))]
			}
		}
		j.layouts[x.Name] = l
	}
	return j
}

// layoutOf returns the layout a tensor follows: its own, or its
// parameter's for a moment.
func (j jobLayout) layoutOf(name string) (parallel.TensorLayout, []int, bool) {
	param := strings.TrimPrefix(name, "moments.")
	l, ok := j.layouts[param]
	return l, j.paramStages[param], ok
}

// writeSet writes model as the job lays it out, one file per rank in
// dir, each rank holding its stage's tensors (and the scalars) in model
// order, sliced by its layout: the reference a reshard must reproduce
// byte for byte. It returns the files.
func (j jobLayout) writeSet(t *testing.T, dir string, model []ckpt.Tensor) []string {
	t.Helper()
	var files []string
	for r := range j.devices() {
		stage, local := r/j.stageDevices, r%j.stageDevices
		var tensors []ckpt.Tensor
		for _, x := range model {
			l, stages, ok := j.layoutOf(x.Name)
			if !ok {
				tensors = append(tensors, x)
				continue
			}
			if !slices.Contains(stages, stage) {
				continue
			}
			whole := make([]int, len(x.Dims))
			for i, v := range x.Dims {
				whole[i] = int(v)
			}
			boxes, err := l.Boxes(whole)
			if err != nil {
				t.Fatalf("layout of %s: %v", x.Name, err)
			}
			b := boxes[local]
			dims := make([]int64, len(b.Shape))
			for i, v := range b.Shape {
				dims[i] = int64(v)
			}
			tensors = append(tensors, ckpt.Tensor{Name: x.Name, Dims: dims, DType: x.DType, Data: sliceOf(x, b)})
		}
		p := filepath.Join(dir, fmt.Sprintf("rank_%d.ckpt", r))
		if err := ckpt.Write(p, tensors, ckpt.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	return files
}

// writeStrategies writes the strategy files the job's ranks write, one per
// rank as MindSpore does (each holding its stage's layouts), in random
// forms, into a new directory, and returns it.
func (j jobLayout) writeStrategies(t *testing.T, rng *rand.Rand) string {
	t.Helper()
	dir := t.TempDir()
	for r := range j.devices() {
		s := r / j.stageDevices
		f := &parallel.StrategyFile{
			CurrentStage: s,
			Operators:    map[string][][]int{fmt.Sprintf("stage%d/MatMul-op0", s): {{1, j.stageDevices}}},
			Layouts:      map[string]parallel.TensorLayout{},
		}
		for name, l := range j.layouts {
			if slices.Contains(j.paramStages[name], s) {
				f.Layouts[name] = l
			}
		}
		format, ext := parallel.FormatProto, "ckpt"
		if rng.IntN(2) == 0 {
			format, ext = parallel.FormatJSON, "json"
		}
		if err := parallel.WriteStrategyFile(filepath.Join(dir, fmt.Sprintf("strategy_%d.%s", r, ext)), f, format); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sliceOf returns box of a whole tensor's bytes (ckpttest.BoxBytes).
func sliceOf(whole ckpt.Tensor, box parallel.Box) []byte {
	elem, _ := ckpt.DTypeSize(whole.DType)
	return ckpttest.BoxBytes(whole.Data, whole.Dims, elem, box.Offset, box.Shape)
}

func sameBytes(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d files, want %d", what, len(got), len(want))
	}
	for r := range got {
		a, err1 := os.ReadFile(got[r])
		b, err2 := os.ReadFile(want[r])
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s: rank %d: %s differs from the reference %s (%v %v)", what, r, got[r], want[r], err1, err2)
		}
	}
}

func outFiles(dir string, m *reshard.Manifest) []string {
	var out []string
	for _, f := range m.Files {
		out = append(out, filepath.Join(dir, f.Path))
	}
	return out
}

// reshardByStrategy reshards the set files (laid out by the strategy in srcDir)
// to the layout of the strategy files in dstDir, into a new directory.
func reshardByStrategy(t *testing.T, files []string, srcDir, dstDir string, opt reshard.Options) []string {
	t.Helper()
	src, err := parallel.ReadStrategies(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Open(files, src)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := parallel.ReadStrategies(dstDir)
	if err != nil {
		t.Fatal(err)
	}
	target, err := set.Target(dst)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	m, err := reshard.Run(context.Background(), set.Source, target, out, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.Verify(context.Background(), out, opt); err != nil {
		t.Fatal(err)
	}
	return outFiles(out, m)
}

// TestPropertyPipelineLayouts: random layouts among plain operator and
// data splits, pipeline stages of them and optimizer sharding, on 2, 4
// and 8 devices, written per stage as MindSpore writes them (each rank
// holding its stage's parameters, one strategy file per rank). Resharding
// between any two gives exactly the files the target layout's writer
// makes (N -> M), resharding back gives the source files bit for bit
// (M -> N), and merging gives ckpt.Encode of the whole model.
func TestPropertyPipelineLayouts(t *testing.T) {
	seen := map[string]int{}
	defer func() {
		if !t.Failed() && (seen["pipeline"] == 0 || seen["optimizer"] == 0 || seen["plain"] == 0 || seen["pipeline+optimizer"] == 0) {
			t.Errorf("layouts drawn: %v; want each kind", seen)
		}
	}()
	for seed := range uint64(24) {
		rng := rand.New(rand.NewPCG(seed, 28))
		model := pipelineModel(rng)
		draw := func(n int) jobLayout {
			k := 1
			if ks := []int{1, 2, 4}; rng.IntN(3) > 0 {
				k = ks[1+rng.IntN(2)]
			}
			if n%k != 0 {
				k = n
			}
			j := randomJobLayout(rng, model, n, k, rng.IntN(2) == 0)
			opt := slices.ContainsFunc(slices.Collect(maps.Values(j.layouts)), func(l parallel.TensorLayout) bool { return l.OptWeightShardSize > 1 })
			kind := "plain"
			switch {
			case k > 1 && opt:
				kind = "pipeline+optimizer"
			case k > 1:
				kind = "pipeline"
			case opt:
				kind = "optimizer"
			}
			seen[kind]++
			return j
		}
		n := []int{2, 4, 8}[rng.IntN(3)]
		m := []int{1, 2, 4, 8}[rng.IntN(4)]
		a, b := draw(n), draw(m)
		t.Run(fmt.Sprintf("%d/%v_to_%v", seed, a, b), func(t *testing.T) {
			opt := reshard.Options{MaxMemory: int64(max(n, m))*4096 + 4096 + rng.Int64N(4096), Workers: 1 + rng.IntN(3)}
			srcFiles := a.writeSet(t, t.TempDir(), model)
			srcDir := a.writeStrategies(t, rng)
			wantB := b.writeSet(t, t.TempDir(), model)
			dstDir := b.writeStrategies(t, rng)

			gotB := reshardByStrategy(t, srcFiles, srcDir, dstDir, opt)
			sameBytes(t, "N -> M", gotB, wantB)
			back := reshardByStrategy(t, gotB, dstDir, srcDir, opt)
			sameBytes(t, "N -> M -> N", back, srcFiles)

			sf, err := parallel.ReadStrategies(srcDir)
			if err != nil {
				t.Fatal(err)
			}
			set, err := Open(srcFiles, sf)
			if err != nil {
				t.Fatal(err)
			}
			one := t.TempDir()
			if _, err := reshard.Merge(context.Background(), set.Source, one, "merged.ckpt", opt); err != nil {
				t.Fatal(err)
			}
			var whole bytes.Buffer
			if err := ckpt.Encode(&whole, model, ckpt.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(one, "merged.ckpt")); !bytes.Equal(got, whole.Bytes()) {
				t.Fatal("N -> 1 differs from ckpt.Encode of the whole model")
			}
		})
	}
}

// TestPipelineModelDataOptimizerTo4To1: the case. A set trained
// with 2 pipeline stages, each of 2 (model) x 2 (data) devices with the
// weights optimizer-sharded over the data-parallel pair, on 8 devices;
// its per-stage strategy files merged by the CLI's code path and, read
// back from the merged file, used as the source. Resharded to 4 devices
// without stages and then to one file, bit-exact against the writers.
func TestPipelineModelDataOptimizerTo4To1(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	model := pipelineModel(rng)
	a := jobLayout{stages: 2, stageDevices: 4, layouts: map[string]parallel.TensorLayout{}, paramStages: map[string][]int{}}
	b := jobLayout{stages: 1, stageDevices: 4, layouts: map[string]parallel.TensorLayout{}, paramStages: map[string][]int{}}
	for _, x := range model {
		if !isParam(x.Name) {
			continue
		}
		var layer int
		fmt.Sscanf(x.Name, "layer%d.", &layer)
		a.paramStages[x.Name], b.paramStages[x.Name] = []int{layer / 2}, []int{0}
		if x.Name == "embedding" {
			a.paramStages[x.Name] = []int{0, 1}
		}
		// [data 2, model 2]: weights split along columns over the model
		// axis, their update sharded over the data axis; biases split.
		la := parallel.TensorLayout{DeviceMatrix: []int{2, 2}, TensorMap: []int{-1, 0}, OptWeightShardStep: 2, OptWeightShardSize: 2}
		if len(x.Dims) == 1 {
			la = parallel.TensorLayout{DeviceMatrix: []int{2, 2}, TensorMap: []int{0}}
		}
		a.layouts[x.Name] = la
		b.layouts[x.Name] = parallel.TensorLayout{DeviceMatrix: []int{4}, TensorMap: []int{0}}
		if len(x.Dims) == 2 {
			b.layouts[x.Name] = parallel.TensorLayout{DeviceMatrix: []int{4}, TensorMap: []int{0, -1}}
		}
	}
	srcFiles := a.writeSet(t, t.TempDir(), model)
	srcDir := a.writeStrategies(t, rng)
	// Merged, written and read back: the merged file alone lays out the
	// pipeline set (stages found from which ranks hold each parameter).
	merged, err := parallel.ReadStrategies(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	mergedDir := t.TempDir()
	if err := parallel.WriteStrategyFile(filepath.Join(mergedDir, "merged.ckpt"), merged, parallel.FormatProto); err != nil {
		t.Fatal(err)
	}
	wantB := b.writeSet(t, t.TempDir(), model)
	dstDir := b.writeStrategies(t, rng)
	opt := reshard.Options{MaxMemory: 64 << 10}
	gotB := reshardByStrategy(t, srcFiles, mergedDir, dstDir, opt)
	sameBytes(t, "8 (2 stages x 2 x 2, optimizer-sharded) -> 4", gotB, wantB)

	sf, err := parallel.ReadStrategies(dstDir)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Open(gotB, sf)
	if err != nil {
		t.Fatal(err)
	}
	one := t.TempDir()
	if _, err := reshard.Merge(context.Background(), set.Source, one, "merged.ckpt", opt); err != nil {
		t.Fatal(err)
	}
	var whole bytes.Buffer
	if err := ckpt.Encode(&whole, model, ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(one, "merged.ckpt")); !bytes.Equal(got, whole.Bytes()) {
		t.Fatal("4 -> 1 differs from ckpt.Encode of the whole model")
	}
	// Back to the pipeline layout from the 4-device set: the source files.
	back := reshardByStrategy(t, gotB, dstDir, srcDir, opt)
	sameBytes(t, "8 -> 4 -> 8", back, srcFiles)
}

// twoStageJob is 2 stages of 2 devices, every parameter split along dim 0.
func twoStageJob(model []ckpt.Tensor) jobLayout {
	j := jobLayout{stages: 2, stageDevices: 2, layouts: map[string]parallel.TensorLayout{}, paramStages: map[string][]int{}}
	for _, x := range model {
		if !isParam(x.Name) {
			continue
		}
		var layer int
		fmt.Sscanf(x.Name, "layer%d.", &layer)
		j.paramStages[x.Name] = []int{layer / 2}
		if x.Name == "embedding" {
			j.paramStages[x.Name] = []int{0, 1}
		}
		j.layouts[x.Name] = parallel.TensorLayout{DeviceMatrix: []int{2}, TensorMap: append([]int{0}, -1)[:len(x.Dims)]}
	}
	return j
}

func TestPipelineSetErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	model := pipelineModel(rng)
	j := twoStageJob(model)
	files := j.writeSet(t, t.TempDir(), model)
	dir := j.writeStrategies(t, rng)
	all, err := parallel.ReadStrategies(dir)
	if err != nil {
		t.Fatal(err)
	}
	stage0, err := parallel.MergeStrategyFiles(strategyFilesOfStage(t, dir, 0)...)
	if err != nil {
		t.Fatal(err)
	}
	wrongStage := *all
	wrongStage.ParamStages = maps.Clone(all.ParamStages)
	wrongStage.ParamStages["layer1.weight"] = []int{1}

	// Rank 3 (stage 1) without layer3.weight.
	damaged := slices.Clone(files)
	var kept []ckpt.Tensor
	for _, x := range readAll(t, files[3]) {
		if x.Name != "layer3.weight" {
			kept = append(kept, x)
		}
	}
	damaged[3] = filepath.Join(t.TempDir(), "rank_3.ckpt")
	if err := ckpt.Write(damaged[3], kept, ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files []string
		sf    *parallel.StrategyFile
		want  string
	}{
		{"one stage of the set", files[:2], all, "the strategy describes pipeline stages [0 1] of 2 devices each, the set has 2 ranks"},
		{"one stage's strategy", files, stage0, "strategy file is for 2 devices, the set has 4 ranks (or 2 pipeline stages of 2: give every stage's strategy file, or a directory of them; this one describes stage 0 only)"},
		{"rank without its stage's tensor", damaged, all, `rank_3.ckpt (rank 3, pipeline stage 1): tensor "layer3.weight" is missing; rank 2 of the same stage`},
		{"strategy puts a parameter in another stage", files, &wrongStage, `parameter "layer1.weight": the strategy files put it in stages [1], the checkpoints of stages [0] hold it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.files, tc.sf)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v\nwant it to say %q", err, tc.want)
			}
		})
	}

	// A merged file read back cannot say where a pipeline target's
	// parameters go.
	set, err := Open(files, all)
	if err != nil {
		t.Fatal(err)
	}
	data, err := parallel.EncodeStrategyFile(all, parallel.FormatProto)
	if err != nil {
		t.Fatal(err)
	}
	readBack, err := parallel.DecodeStrategyFile("merged.ckpt", data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Target(readBack); err == nil || !strings.Contains(err.Error(), "a merged strategy file does not say which stage holds each parameter") {
		t.Fatalf("pipeline target from a merged file: %v", err)
	}
	// As a source it is enough: the stages come from the files.
	if _, err := Open(files, readBack); err != nil {
		t.Fatalf("merged file as the source strategy: %v", err)
	}
	// A rank outside the stage holding a tensor: the engine refuses.
	src := set.Source
	src.Placements = maps.Clone(src.Placements)
	p := src.Placements["layer0.weight"]
	p.Ranks = []int{0}
	src.Placements["layer0.weight"] = p
	if _, err := reshard.Plan(context.Background(), src, reshard.Target{Ranks: 1}, reshard.Options{}); err == nil || !strings.Contains(err.Error(), `(rank 1): holds tensor "layer0.weight", which its placement gives to ranks [0] only`) {
		t.Fatalf("tensor on a rank its placement does not list: %v", err)
	}
}

func strategyFilesOfStage(t *testing.T, dir string, stage int) []string {
	t.Helper()
	var out []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		f, err := parallel.ReadStrategyFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if f.CurrentStage == stage {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

func readAll(t *testing.T, path string) []ckpt.Tensor {
	t.Helper()
	tensors, err := ckpt.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return tensors
}

// TestLoadPipelineSetWithStrategyDirectory: a set directory as a pipeline
// run leaves it (device{i}/ckpt_{i}/ per rank, each rank's strategy file in
// strategy/) is found, laid out and merged without naming the strategy.
func TestLoadPipelineSetWithStrategyDirectory(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 28))
	model := pipelineModel(rng)
	j := randomJobLayout(rng, model, 8, 2, true)
	flat := j.writeSet(t, t.TempDir(), model)
	root := t.TempDir()
	for r, f := range flat {
		if _, err := WriteRank(root, r, "CKP-1_4.ckpt", readAll(t, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(j.writeStrategies(t, rng), filepath.Join(root, StrategyDirName)); err != nil {
		t.Fatal(err)
	}
	set, in, err := Load([]string{root}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if in.Strategy != filepath.Join(root, StrategyDirName) || len(in.Files) != 8 {
		t.Fatalf("strategy %q, %d files", in.Strategy, len(in.Files))
	}
	out := filepath.Join(t.TempDir(), "full.ckpt")
	if _, err := Merge(context.Background(), set, in, out, false, reshard.Options{MaxMemory: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	var whole bytes.Buffer
	if err := ckpt.Encode(&whole, model, ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, whole.Bytes()) {
		t.Fatal("merge of the pipeline set differs from ckpt.Encode of the whole model")
	}
}
