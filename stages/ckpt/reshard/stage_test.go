package reshard_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/cli"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/host"
	"github.com/mspipe/mspipe/stages/ckpt/ckptset"
	"github.com/mspipe/mspipe/stages/ckpt/reshard"
	"github.com/mspipe/mspipe/stages/npu/train"
)

// TestMain lets mspipe run re-execute this test binary as its built-in
// stage plugins (mspipe __stage NAME) and training ranks, as it
// re-executes itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == host.ServeCommand || os.Args[1] == train.WorkerCommand) {
		os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func run(t *testing.T, with map[string]any) (map[string]any, []plugins.Event, error) {
	t.Helper()
	var events []plugins.Event
	out, err := reshard.New().Run(context.Background(), plugins.RunRequest{
		RunID: "r1", StageID: "reshard", With: with, WorkDir: t.TempDir(), Cluster: plugins.Cluster{Devices: 1}, Attempt: 1,
	}, func(e plugins.Event) { events = append(events, e) })
	return out, events, err
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
		got, err := ckpt.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := ckpt.Compare(tensors, got); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
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

// TestTwoStagePipeline runs integrate and reshard through mspipe run, from
// a set a training stage would have left, as examples/two-stage-training
// chains them.
func TestTwoStagePipeline(t *testing.T) {
	_, tensors := integrated(t)
	set := t.TempDir()
	for r := range 2 {
		if _, err := ckptset.WriteRank(set, r, "CKP-1_4.ckpt", tensors); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	spec := filepath.Join(dir, "chain.yaml")
	if err := os.WriteFile(spec, []byte(`version: 1
name: chain
stages:
  integrate:
    uses: ckpt/integrate
    with: {from: `+set+`}
  reshard:
    uses: ckpt/reshard
    needs: [integrate]
    with: {from: "${{ stages.integrate.outputs.checkpoint }}", devices: 4}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	runs := filepath.Join(dir, "runs")
	if code := cli.Main(context.Background(), []string{"run", "--runs-dir", runs, spec}, &out, &errb); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	resharded := filepath.Join(runs, strings.TrimSpace(out.String()), "stages", "reshard", "checkpoints")
	files, err := ckptset.Find(resharded, "")
	if err != nil || len(files) != 4 {
		t.Fatalf("resharded set %v: %v\n%s", files, err, errb.String())
	}
	got, err := ckpt.Read(files[3])
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.Compare(tensors, got); err != nil {
		t.Fatal(err)
	}
}

// TestTrainIntegrateReshardRetrain is the life of examples/two-stage-training
// in data parallel: 4 ranks train, integrate merges what they wrote (no
// strategy file: replicated, rank 0's values), reshard lays it out for 2
// devices, and a 2-device training starts from it with init:.
func TestTrainIntegrateReshardRetrain(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "life.yaml")
	if err := os.WriteFile(spec, []byte(`version: 1
name: life
cluster: {devices: 4}
stages:
  prepare:
    uses: cifar/prepare
    with: {source: synthetic, shards: 4, train_images: 200, test_images: 20}
  train:
    uses: npu/train
    needs: [prepare]
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, batch_size: 10, epochs: 1, eval: false, threads: 1}
  integrate:
    uses: ckpt/integrate
    needs: [train]
    with: {from: "${{ stages.train.outputs.checkpoints }}"}
  reshard:
    uses: ckpt/reshard
    needs: [integrate]
    with: {from: "${{ stages.integrate.outputs.checkpoint }}", devices: 2}
  retrain:
    uses: npu/train
    needs: [reshard]
    cluster: {devices: 2}
    with: {data: "${{ stages.prepare.outputs.dir }}", model: cnn, mode: data_parallel, batch_size: 10, epochs: 1, eval: false, threads: 1, init: "${{ stages.reshard.outputs.checkpoints }}"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	runs := filepath.Join(dir, "runs")
	if code := cli.Main(context.Background(), []string{"run", "--runs-dir", runs, spec}, &out, &errb); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	stages := filepath.Join(runs, strings.TrimSpace(out.String()), "stages")
	trained, err := ckptset.Find(filepath.Join(stages, "train"), "")
	if err != nil || len(trained) != 4 {
		t.Fatalf("train set %v: %v", trained, err)
	}
	want, err := ckpt.Read(trained[0])
	if err != nil {
		t.Fatal(err)
	}
	resharded, err := ckptset.Find(filepath.Join(stages, "reshard", "checkpoints"), "")
	if err != nil || len(resharded) != 2 {
		t.Fatalf("resharded set %v: %v", resharded, err)
	}
	for _, f := range resharded {
		got, err := ckpt.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := ckpt.Compare(want, got); err != nil {
			t.Fatalf("%s holds other values than the training's rank 0: %v", f, err)
		}
	}
	if !strings.Contains(errb.String(), "[retrain] succeeded") {
		t.Fatalf("retrain did not run from the resharded set:\n%s", errb.String())
	}
	decodeEveryCheckpoint(t, stages, 4+1+2+2)
}

// TestReshardToTheNextTrainingsLayout: a semi_auto_parallel training on 4
// devices saves slices; they are integrated, then resharded twice for a
// 2-device training with another strategy: once to that training's layout
// (model, mode, strategy), once by the devices rule. The retrain from the
// first re-cuts nothing, the one from the second re-cuts the split weight,
// and each says so in its log.
func TestReshardToTheNextTrainingsLayout(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "next.yaml")
	if err := os.WriteFile(spec, []byte(`version: 1
name: next
cluster: {devices: 4}
stages:
  prepare:
    uses: cifar/prepare
    with: {source: synthetic, shards: 4, train_images: 80, test_images: 20}
  train:
    uses: npu/train
    needs: [prepare]
    with: {data: "${{ stages.prepare.outputs.dir }}", model: semi_auto_net, mode: semi_auto_parallel, strategy: {fc.matmul: [[1, 1], [1, 4]]}, integrated_save: false, batch_size: 10, epochs: 1, eval: false, threads: 1}
  integrate:
    uses: ckpt/integrate
    needs: [train]
    with: {from: "${{ stages.train.outputs.checkpoints }}"}
  reshard:
    uses: ckpt/reshard
    needs: [integrate]
    with: {from: "${{ stages.integrate.outputs.checkpoint }}", devices: 2, model: semi_auto_net, mode: semi_auto_parallel, strategy: {fc.matmul: [[1, 1], [1, 2]]}, batch_size: 10}
  reshard_rule:
    uses: ckpt/reshard
    needs: [integrate]
    with: {from: "${{ stages.integrate.outputs.checkpoint }}", devices: 2}
  retrain:
    uses: npu/train
    needs: [reshard]
    cluster: {devices: 2}
    with: {data: "${{ stages.prepare.outputs.dir }}", model: semi_auto_net, mode: semi_auto_parallel, strategy: {fc.matmul: [[1, 1], [1, 2]]}, batch_size: 10, epochs: 1, eval: false, threads: 1, init: "${{ stages.reshard.outputs.checkpoints }}"}
  retrain_rule:
    uses: npu/train
    needs: [reshard_rule]
    cluster: {devices: 2}
    with: {data: "${{ stages.prepare.outputs.dir }}", model: semi_auto_net, mode: semi_auto_parallel, strategy: {fc.matmul: [[1, 1], [1, 2]]}, batch_size: 10, epochs: 1, eval: false, threads: 1, init: "${{ stages.reshard_rule.outputs.checkpoints }}"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	runs := filepath.Join(dir, "runs")
	if code := cli.Main(context.Background(), []string{"run", "--runs-dir", runs, spec}, &out, &errb); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out.String(), errb.String())
	}
	stages := filepath.Join(runs, strings.TrimSpace(out.String()), "stages")
	sf, err := parallel.ReadStrategyFile(filepath.Join(stages, "reshard", "checkpoints", "strategy.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	// The strategy file beside the set is the one the retrain writes.
	own, err := parallel.ReadStrategyFile(filepath.Join(stages, "retrain", "strategy.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sf, own) {
		t.Errorf("strategy file beside the set:\n%+v\nthe retrain's:\n%+v", sf, own)
	}
	if l := sf.Layouts["fc.weight"]; !reflect.DeepEqual(l.TensorMap, []int{-1, 0}) || l.Devices() != 2 {
		t.Errorf("fc.weight %+v, want its columns over 2 devices", l)
	}
	for r := range 2 {
		log := readFile(t, filepath.Join(stages, "retrain", fmt.Sprintf("device%d", r), fmt.Sprintf("train.log%d", r)))
		if !strings.Contains(log, "is in this rank's layout: no tensor re-cut") {
			t.Errorf("retrain rank %d re-cut its init, or did not say:\n%s", r, log)
		}
		log = readFile(t, filepath.Join(stages, "retrain_rule", fmt.Sprintf("device%d", r), fmt.Sprintf("train.log%d", r)))
		if !strings.Contains(log, "init: re-cut 2 whole tensors of ") || !strings.Contains(log, ": fc.weight, moments.fc.weight\n") {
			t.Errorf("retrain_rule rank %d should re-cut fc.weight and its moments:\n%s", r, log)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// decodeEveryCheckpoint decodes every .ckpt under dir (trainer, integrate,
// reshard outputs) with stock protoc against MindSpore's checkpoint.proto,
// as MindSpore's default (crc_check=False) writes and reads them, and
// checks that there are at least want of them.
func decodeEveryCheckpoint(t *testing.T, dir string, want int) {
	t.Helper()
	ckpttest.ProtocPath(t)
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".ckpt" || slices.Contains(ckptset.StrategyNames, d.Name()) {
			return err // strategy.ckpt is a strategy file, not a checkpoint
		}
		f, err := ckpt.ReadFile(p)
		if err != nil {
			return err
		}
		if vals := ckpttest.DecodeFile(t, p); len(vals) != f.Values || f.CRC {
			t.Errorf("%s: protoc decoded %d values, ckpt %d, crc_num trailer %v", p, len(vals), f.Values, f.CRC)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < want {
		t.Fatalf("decoded %d checkpoints under %s, want at least %d", n, dir, want)
	}
}
