package reshard_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/plugins/sdk/sdktest"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/shard"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/stages/ckpt/reshard"
)

func run(t *testing.T, with map[string]any) (map[string]any, []plugins.Event, error) {
	t.Helper()
	r := sdktest.Run(context.Background(), t, reshard.New(), plugins.RunRequest{StageID: "reshard", With: with})
	return r.Outputs, r.Events(), r.Err
}

// integrated writes a whole checkpoint as ckpt/integrate leaves it: the
// seeds' [8, 8] weight (element i is i), its moments, a scalar.
func integrated(t *testing.T) (string, []ckpt.Tensor) {
	t.Helper()
	w, m := make([]float32, 64), make([]float32, 64)
	for i := range w {
		w[i], m[i] = float32(i), float32(i)/2
	}
	wt, _ := ckpt.NewFloat32("weight", []int64{8, 8}, w)
	mt, _ := ckpt.NewFloat32("moments.weight", []int64{8, 8}, m)
	lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
	tensors := []ckpt.Tensor{wt, mt, lr}
	path := filepath.Join(t.TempDir(), "CKP-2_8.ckpt")
	if err := ckpt.Write(path, tensors, ckpt.WriteOptions{CRC: true}); err != nil {
		t.Fatal(err)
	}
	return path, tensors
}

func TestDescribeAndValidate(t *testing.T) {
	d, err := reshard.New().Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, o := range d.Outputs {
		outs = append(outs, o.Name+":"+o.Type)
	}
	if d.Name != "ckpt/reshard" || strings.Join(outs, " ") != "checkpoints:path strategy:path manifest:path devices:int" {
		t.Errorf("declaration %s with outputs %v", d.Name, outs)
	}
	for _, tc := range []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"from": "/x", "devices": 4, "bn_stats": "mean", "max_memory": "1GiB"}, ""},
		{map[string]any{"from": "/x", "devices": 4, "strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}}, "/strategy: strategy describes the next training's layout: give its model too"},
		{map[string]any{"from": "/x", "devices": 4, "model": "semi_auto_net", "mode": "semi_auto_parallel", "strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}}, ""},
		{map[string]any{"from": "/x", "devices": 4, "model": "semi_auto_net", "mode": "auto_parallel"}, "/mode: auto_parallel searches its strategy when the job starts"},
		{map[string]any{"from": "/x", "devices": 4, "model": "cnn", "target_strategy": "s.ckpt"}, "/target_strategy: give the target as model"},
		{map[string]any{"from": "/x", "devices": 4, "format": "ckpt"}, `unknown field "format"`},
		// 100000 devices started writing 315 GB and left 71,450 directories.
		{map[string]any{"from": "/x", "devices": 100000}, "/devices"},
		{map[string]any{"from": "/x", "devices": 4097}, "4096"},
		{map[string]any{"from": "/x", "devices": 4096}, ""},
		{map[string]any{"from": "/x", "devices": 4, "model": "semi_auto_net", "mode": "data_parallel", "parallel_optimizer": true, "optimizer_weight_shard_size": 2}, ""},
		{map[string]any{"from": "/x", "devices": 4, "parallel_optimizer": true}, "/parallel_optimizer: parallel_optimizer describes the next training's layout: give its model too"},
		{map[string]any{"from": "/x", "devices": 4, "model": "semi_auto_net", "mode": "data_parallel", "optimizer_weight_shard_size": 2}, "/optimizer_weight_shard_size: optimizer_weight_shard_size needs parallel_optimizer: true"},
		{map[string]any{"from": "/x", "devices": 4, "model": "semi_auto_net", "mode": "data_parallel", "parallel_optimizer": true, "optimizer_weight_shard_size": 3}, "does not divide the 4 devices"},
		{map[string]any{"from": "/x", "devices": 4, "model": "hybrid_net", "mode": "hybrid_parallel", "parallel_optimizer": true}, "/parallel_optimizer: the parallel optimizer is for data_parallel and semi_auto_parallel, not hybrid_parallel"},
		{map[string]any{"from": "/x", "devices": 4, "model": "cnn", "mode": "semi_auto_parallel", "pipeline_stages": 2, "micro_size": 4, "pipeline_stage": map[string]any{"conv2": 1}}, ""},
		{map[string]any{"from": "/x", "devices": 4, "pipeline_stages": 2}, "/pipeline_stages: pipeline_stages describes the next training's layout: give its model too"},
		{map[string]any{"from": "/x", "devices": 4, "model": "cnn", "mode": "semi_auto_parallel", "micro_size": 4}, "/pipeline_stages: micro_size and pipeline_stage describe a pipeline training: give its pipeline_stages (2 or more) too"},
		{map[string]any{"from": "/x", "devices": 6, "model": "cnn", "mode": "semi_auto_parallel", "pipeline_stages": 4}, "/pipeline_stages: 4 pipeline stages do not divide the 6 devices"},
	} {
		problems, err := reshard.New().Validate(context.Background(), plugins.ValidateRequest{With: tc.with})
		if err != nil {
			t.Fatal(err)
		}
		if got := plugins.JoinProblems(problems); !strings.Contains(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%v: problems %q, want %q", tc.with, got, tc.want)
		}
	}
}

// TestReshardIntegratedForTwoDevices: an integrated checkpoint (no layout:
// everything replicated) for 2 devices, in the layout npu/train's init:
// reads, with a strategy file and a manifest.
func TestReshardIntegratedForTwoDevices(t *testing.T) {
	path, tensors := integrated(t)
	out, events, err := run(t, map[string]any{"from": path, "devices": 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := out["checkpoints"].(string)
	if out["devices"] != 2 || out["strategy"] != filepath.Join(dir, "strategy.ckpt") || out["manifest"] != filepath.Join(dir, "manifest.json") {
		t.Fatalf("outputs %v", out)
	}
	files, err := ckptset.Find(dir, "")
	if err != nil || len(files) != 2 || filepath.Base(files[1]) != "CKP-2_8.ckpt" {
		t.Fatalf("set %v: %v", files, err)
	}
	for _, f := range files {
		got, err := ckpt.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := ckpt.Compare(tensors, got.Tensors); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// By default plain protobuf, as MindSpore saves: stock protoc
		// decodes it against checkpoint.proto.
		if vals := ckpttest.DecodeFile(t, f); got.CRC || len(vals) != got.Values {
			t.Fatalf("%s: crc_num trailer %v, protoc decoded %d values of %d", f, got.CRC, len(vals), got.Values)
		}
	}
	withCRC, _, err := run(t, map[string]any{"from": path, "devices": 2, "crc_check": true})
	if err != nil {
		t.Fatal(err)
	}
	crcFiles, err := ckptset.Find(withCRC["checkpoints"].(string), "")
	if err != nil {
		t.Fatal(err)
	}
	if f, err := ckpt.ReadFile(crcFiles[0]); err != nil || !f.CRC {
		t.Fatalf("crc_check: true wrote no trailer (%v)", err)
	}
	sf, err := parallel.ReadStrategyFile(out["strategy"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if l := sf.Layouts["weight"]; !reflect.DeepEqual(l.DeviceMatrix, []int{2}) || !reflect.DeepEqual(l.TensorMap, []int{-1, -1}) || len(sf.Layouts) != 1 {
		t.Fatalf("target strategy %+v", sf.Layouts)
	}
	var progressed bool
	for _, e := range events {
		progressed = progressed || (e.Progress != nil && e.Progress.Done == e.Progress.Total && e.Progress.Total > 0)
	}
	if !progressed {
		t.Fatal("no final progress event")
	}
}

// TestReshardSetToStrategy: a 4-rank set split along dimension 0 to the
// 2-device layout of a target strategy file, then that output (read through
// its manifest) to 1 device: the whole tensors back.
func TestReshardSetToStrategy(t *testing.T) {
	path, tensors := integrated(t)
	src := t.TempDir()
	for r := range 4 {
		var slice []ckpt.Tensor
		for _, x := range tensors[:2] {
			slice = append(slice, ckpt.Tensor{Name: x.Name, DType: x.DType, Dims: []int64{2, 8}, Data: x.Data[r*64 : (r+1)*64]})
		}
		if _, err := ckptset.WriteRank(src, r, "CKP-2_8.ckpt", append(slice, tensors[2])); err != nil {
			t.Fatal(err)
		}
	}
	four := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{"weight": {DeviceMatrix: []int{4}, TensorMap: []int{0, -1}}}}
	if err := parallel.WriteStrategyFile(filepath.Join(src, "strategy.json"), four, parallel.FormatJSON); err != nil {
		t.Fatal(err)
	}
	twoCols := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{"weight": {DeviceMatrix: []int{2}, TensorMap: []int{-1, 0}}}}
	target := filepath.Join(t.TempDir(), "target.ckpt")
	if err := parallel.WriteStrategyFile(target, twoCols, parallel.FormatProto); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, map[string]any{"from": src, "devices": 4, "target_strategy": target}); err == nil || !strings.Contains(err.Error(), "is for 2 devices, devices is 4") {
		t.Fatalf("devices mismatch: %v", err)
	}
	out, _, err := run(t, map[string]any{"from": src, "devices": 2, "target_strategy": target})
	if err != nil {
		t.Fatal(err)
	}
	dir := out["checkpoints"].(string)
	r1, err := ckpt.Read(ckptset.FilePath(dir, 1, "CKP-2_8.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := r1[0].Float32s()
	if !reflect.DeepEqual(r1[0].Dims, []int64{8, 4}) || w[0] != 4 || w[4] != 12 {
		t.Fatalf("rank 1 holds columns 4-7: dims %v, %v", r1[0].Dims, w[:8])
	}
	if m, _ := r1[1].Float32s(); !reflect.DeepEqual(r1[1].Dims, []int64{8, 4}) || m[0] != 2 {
		t.Fatalf("moments follow weight: %v %v", r1[1].Dims, m[:4])
	}

	back, _, err := run(t, map[string]any{"from": dir, "devices": 1})
	if err != nil {
		t.Fatal(err)
	}
	files, _ := ckptset.Find(back["checkpoints"].(string), "")
	got, err := ckpt.Read(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.Compare(tensors, got); err != nil {
		t.Fatalf("4 -> 2 -> 1 is not the whole checkpoint: %v (from %s)", err, path)
	}
}

// The stage's own earlier output given as from (a retry resharding what it
// wrote) is refused before anything is written: the output would replace
// its input. Another attempt into the same work dir replaces the set whole.
func TestReshardRefusesItsOwnOutputAsInput(t *testing.T) {
	path, _ := integrated(t)
	work := t.TempDir()
	runIn := func(with map[string]any) (map[string]any, error) {
		return reshard.New().Run(context.Background(), plugins.RunRequest{
			RunID: "r1", StageID: "reshard", With: with, WorkDir: work, Cluster: plugins.Cluster{Devices: 1}, Attempt: 1,
		}, func(plugins.Event) {})
	}
	out, err := runIn(map[string]any{"from": path, "devices": 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := out["checkpoints"].(string)
	before, err := ckptset.Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runIn(map[string]any{"from": dir, "devices": 1}); err == nil || !strings.Contains(err.Error(), "is the input "+dir) {
		t.Fatalf("from its own output: %v, want a refusal", err)
	}
	if after, err := ckptset.Find(dir, ""); err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("the earlier set changed: %v, %v", after, err)
	}
	if _, err := runIn(map[string]any{"from": path, "devices": 4}); err != nil {
		t.Fatal(err)
	}
	if after, err := ckptset.Find(dir, ""); err != nil || len(after) != 4 {
		t.Fatalf("another attempt: %v, %v; want the 4-rank set alone", after, err)
	}
}

// TestReshardForParallelOptimizer reshards a whole semi_auto_net
// checkpoint for the next training with the parallel optimizer on 4
// devices: semi_auto_parallel with fc.matmul split in two, where each rank
// holds half of its fc.weight slice [3072 64] (the two ranks repeating the
// slice split its update) and keeps end_point.weight [10 128] whole (10
// rows do not divide into 4 pieces); and data_parallel with
// optimizer_weight_shard_size 2, where every parameter is in halves. Each
// rank's file holds exactly those pieces of the weights and their moments,
// cut from the whole tensors, and the strategy file records
// opt_weight_shard_step and opt_weight_shard_size as the training's does.
func TestReshardForParallelOptimizer(t *testing.T) {
	jl, err := shard.LayoutOf(shard.Config{Model: "semi_auto_net", Mode: parallel.DataParallel, Devices: 1, BatchPerDevice: 1})
	if err != nil {
		t.Fatal(err)
	}
	path, whole := wholeCheckpoint(t, []*shard.JobLayout{jl}, []string{"fc.weight", "end_point.weight", "end_point.bias"})
	for _, tc := range []struct {
		name string
		with map[string]any
		// dims of each parameter on every rank; the optimizer-split ones,
		// their strategy file entries' step and size, and how many times
		// over the ranks hold fc.weight.
		dims       map[string]string
		split      []string
		step, size int
		copies     int
	}{
		{"semi_auto_parallel", map[string]any{"mode": "semi_auto_parallel", "strategy": map[string]any{"fc.matmul": []any{[]any{1, 1}, []any{1, 2}}}},
			map[string]string{"fc.weight": "[1536 64]", "end_point.weight": "[10 128]", "end_point.bias": "[10]"}, []string{"fc.weight"}, 2, 2, 1},
		{"data_parallel, shard size 2", map[string]any{"mode": "data_parallel", "optimizer_weight_shard_size": 2},
			map[string]string{"fc.weight": "[1536 128]", "end_point.weight": "[5 128]", "end_point.bias": "[5]"}, []string{"fc.weight", "end_point.weight", "end_point.bias"}, 1, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			with := map[string]any{"from": path, "devices": 4, "model": "semi_auto_net", "batch_size": 2, "parallel_optimizer": true}
			for k, v := range tc.with {
				with[k] = v
			}
			out, _, err := run(t, with)
			if err != nil {
				t.Fatal(err)
			}
			sf, err := parallel.ReadStrategyFile(out["strategy"].(string))
			if err != nil {
				t.Fatal(err)
			}
			for name := range tc.dims {
				l := sf.Layouts[name]
				split := slices.Contains(tc.split, name)
				if split != (l.OptWeightShardSize > 0) || split && (l.OptWeightShardStep != tc.step || l.OptWeightShardSize != tc.size) {
					t.Errorf("%s: opt_weight_shard_step %d, opt_weight_shard_size %d; want them set (%v) to %d and %d", name, l.OptWeightShardStep, l.OptWeightShardSize, split, tc.step, tc.size)
				}
			}
			dir := out["checkpoints"].(string)
			covered := map[string]int{}
			for r := range 4 {
				got, err := ckpt.Read(ckptset.FilePath(dir, r, "CKP-1_4.ckpt"))
				if err != nil {
					t.Fatal(err)
				}
				for _, g := range got {
					param := strings.TrimPrefix(g.Name, "moments.")
					want, ok := tc.dims[param]
					if !ok {
						continue
					}
					if fmt.Sprint(g.Dims) != want {
						t.Errorf("rank %d: %s is %v, want %s", r, g.Name, g.Dims, want)
						continue
					}
					boxes, err := sf.Layouts[param].Boxes(jl.Params[param].Shape)
					if err != nil {
						t.Fatal(err)
					}
					if cut := boxData(whole[g.Name], boxes[r]); !bytes.Equal(g.Data, cut) {
						t.Errorf("rank %d: %s is not the whole tensor's box %v", r, g.Name, boxes[r])
					}
					covered[g.Name] += len(g.Data)
				}
			}
			for _, name := range []string{"fc.weight", "moments.fc.weight"} {
				if copies := covered[name] / len(whole[name].Data); copies != tc.copies {
					t.Errorf("%s: the 4 ranks hold it %d times over, want %d", name, copies, tc.copies)
				}
			}
		})
	}
}

// boxData returns the bytes of t's box b (row-major float32).
// wholeCheckpoint writes a whole checkpoint of the named parameters of
// layouts (nil: every parameter of each, in name order), each with its
// moment, of distinct values, and a learning rate; it returns its path and
// its tensors by name.
func wholeCheckpoint(t *testing.T, layouts []*shard.JobLayout, names []string) (string, map[string]ckpt.Tensor) {
	t.Helper()
	whole := map[string]ckpt.Tensor{}
	var tensors []ckpt.Tensor
	offset := float32(0)
	for _, jl := range layouts {
		params := names
		if params == nil {
			params = slices.Sorted(maps.Keys(jl.Params))
		}
		for _, name := range params {
			shape := jl.Params[name].Shape
			n := 1
			dims := make([]int64, len(shape))
			for k, d := range shape {
				n *= d
				dims[k] = int64(d)
			}
			v, m := make([]float32, n), make([]float32, n)
			for i := range v {
				v[i], m[i] = offset+float32(i), -offset-float32(i)
			}
			offset += float32(n)
			wt, _ := ckpt.NewFloat32(name, dims, v)
			mt, _ := ckpt.NewFloat32("moments."+name, dims, m)
			whole[wt.Name], whole[mt.Name] = wt, mt
			tensors = append(tensors, wt, mt)
		}
	}
	lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
	path := filepath.Join(t.TempDir(), "CKP-1_4.ckpt")
	if err := ckpt.Write(path, append(tensors, lr), ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return path, whole
}

func boxData(t ckpt.Tensor, b parallel.Box) []byte {
	shape := make([]int, len(t.Dims))
	for k, d := range t.Dims {
		shape[k] = int(d)
	}
	var out []byte
	var walk func(k, at int)
	walk = func(k, at int) {
		if k == len(shape) {
			out = append(out, t.Data[4*at:4*at+4]...)
			return
		}
		for i := b.Offset[k]; i < b.Offset[k]+b.Shape[k]; i++ {
			walk(k+1, at*shape[k]+i)
		}
	}
	walk(0, 0)
	return out
}

// TestReshardForPipeline: a whole checkpoint of cnn resharded for a
// training of 2 pipeline stages on 4 devices (the model target with
// pipeline_stages and micro_size): ranks 0-1 get stage 0's parameters
// (conv1, whole as the strategy splits only its batch) and ranks 2-3 stage
// 1's (conv2's weight in halves by its output channels, end_point whole),
// each a box of the whole tensor, moments alike, no rank another stage's;
// the strategy file describes both stages; and it is the one a target
// given as the stages' own strategy files (shard.PipelineLayoutOf, what
// the training's stage leads write) makes.
func TestReshardForPipeline(t *testing.T) {
	strategy := parallel.Strategy{"conv1": {{2, 1, 1, 1}, {1, 1, 1, 1}}, "conv2": {{1, 1, 1, 1}, {2, 1, 1, 1}}}
	stages, err := shard.PipelineLayoutOf(shard.Config{Model: "cnn", Mode: parallel.SemiAutoParallel, Strategy: strategy, Devices: 2, BatchPerDevice: 8, FullBatch: true,
		Pipeline: shard.Pipeline{Stages: 2, Micro: 4}})
	if err != nil {
		t.Fatal(err)
	}
	path, whole := wholeCheckpoint(t, stages, nil)
	out, _, err := run(t, map[string]any{
		"from": path, "devices": 4, "model": "cnn", "mode": "semi_auto_parallel", "batch_size": 4,
		"strategy":        map[string]any{"conv1": []any{[]any{2, 1, 1, 1}, []any{1, 1, 1, 1}}, "conv2": []any{[]any{1, 1, 1, 1}, []any{2, 1, 1, 1}}},
		"pipeline_stages": 2, "micro_size": 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The strategy is checked on a micro-batch, as the training runs it:
	// 8 images a stage in 8 micro-batches leave conv1's batch split in two
	// nothing to split.
	if _, _, err := run(t, map[string]any{
		"from": path, "devices": 4, "model": "cnn", "mode": "semi_auto_parallel", "batch_size": 4,
		"strategy":        map[string]any{"conv1": []any{[]any{2, 1, 1, 1}, []any{1, 1, 1, 1}}},
		"pipeline_stages": 2, "micro_size": 8,
	}); err == nil || !strings.Contains(err.Error(), "conv1") {
		t.Errorf("conv1's batch split in two on micro-batches of 1 image: %v", err)
	} else {
		t.Logf("micro-batches of 1 image: %v", err)
	}
	sf, err := parallel.ReadStrategyFile(out["strategy"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if got := sf.Stages(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("the strategy file describes stages %v, want [0 1]", got)
	}
	stageFiles := t.TempDir()
	for s, jl := range stages {
		if err := parallel.WriteStrategyFile(filepath.Join(stageFiles, fmt.Sprintf("strategy_stage%d.ckpt", s)), jl.StrategyFile(), parallel.FormatProto); err != nil {
			t.Fatal(err)
		}
	}
	byFiles, _, err := run(t, map[string]any{"from": path, "devices": 4, "target_strategy": stageFiles})
	if err != nil {
		t.Fatal(err)
	}
	dir := out["checkpoints"].(string)
	dims := map[string]string{"conv1.weight": "[16 3 3 3]", "conv2.weight": "[16 16 3 3]", "end_point.weight": "[10 32]"}
	for r := range 4 {
		stage := r / 2
		got, err := ckpt.Read(ckptset.FilePath(dir, r, "CKP-1_4.ckpt"))
		if err != nil {
			t.Fatal(err)
		}
		same, err := ckpt.Read(ckptset.FilePath(byFiles["checkpoints"].(string), r, "CKP-1_4.ckpt"))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, same) {
			t.Errorf("rank %d: the model target and the stages' strategy files give different files", r)
		}
		held := map[string]bool{}
		for _, g := range got {
			held[g.Name] = true
			param := strings.TrimPrefix(g.Name, "moments.")
			l, ok := stages[stage].Params[param]
			if !ok {
				if g.Name != "learning_rate" {
					t.Errorf("rank %d (stage %d) holds %s, not a parameter of its stage", r, stage, g.Name)
				}
				continue
			}
			if want, ok := dims[param]; ok && fmt.Sprint(g.Dims) != want {
				t.Errorf("rank %d: %s is %v, want %s", r, g.Name, g.Dims, want)
			}
			tl := sf.Layouts[param]
			boxes, err := tl.Boxes(l.Shape)
			if err != nil {
				t.Fatal(err)
			}
			if cut := boxData(whole[g.Name], boxes[r%2]); !bytes.Equal(g.Data, cut) {
				t.Errorf("rank %d: %s is not the whole tensor's box %v", r, g.Name, boxes[r%2])
			}
		}
		for name := range stages[stage].Params {
			if !held[name] || !held["moments."+name] {
				t.Errorf("rank %d (stage %d) lacks %s or its moments", r, stage, name)
			}
		}
	}
}
