package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
)

// wholeCheckpoint is what ckpt/integrate leaves: the seeds' [8, 8] weight
// (element i is i), its moments, a scalar.
func wholeCheckpoint(t *testing.T) []ckpt.Tensor {
	t.Helper()
	w, m := make([]float32, 64), make([]float32, 64)
	for i := range w {
		w[i], m[i] = float32(i), float32(i)/2
	}
	wt, err := ckpt.NewFloat32("weight", []int64{8, 8}, w)
	if err != nil {
		t.Fatal(err)
	}
	mt, err := ckpt.NewFloat32("moments.weight", []int64{8, 8}, m)
	if err != nil {
		t.Fatal(err)
	}
	lr, err := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
	if err != nil {
		t.Fatal(err)
	}
	return []ckpt.Tensor{wt, mt, lr}
}

// TestIntegrateReshardChain runs integrate and reshard through mspipe run,
// from a set a training stage would have left, as
// examples/two-stage-training chains them.
func TestIntegrateReshardChain(t *testing.T) {
	w := newWorkspace(t)
	tensors := wholeCheckpoint(t)
	set := filepath.Join(w.dir, "set")
	for r := range 2 {
		if _, err := ckptset.WriteRank(set, r, "CKP-1_4.ckpt", tensors); err != nil {
			t.Fatal(err)
		}
	}
	w.write("chain.yaml", `version: 1
name: chain
stages:
  integrate:
    uses: ckpt/integrate
    with: {from: set}
  reshard:
    uses: ckpt/reshard
    needs: [integrate]
    with: {from: "${{ stages.integrate.outputs.checkpoint }}", devices: 4}
`)
	res := w.run("run", "chain.yaml")
	if res.code != 0 {
		t.Fatalf("run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	resharded := filepath.Join(w.dir, "runs", strings.TrimSpace(res.stdout), "stages", "reshard", "checkpoints")
	files, err := ckptset.Find(resharded, "")
	if err != nil || len(files) != 4 {
		t.Fatalf("resharded set %v: %v\n%s", files, err, res.stderr)
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
	w := newWorkspace(t)
	w.write("life.yaml", `version: 1
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
`)
	res := w.run("run", "life.yaml")
	if res.code != 0 {
		t.Fatalf("run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	stages := filepath.Join(w.dir, "runs", strings.TrimSpace(res.stdout), "stages")
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
	if !strings.Contains(res.stderr, "[retrain] succeeded") {
		t.Fatalf("retrain did not run from the resharded set:\n%s", res.stderr)
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
	w := newWorkspace(t)
	w.write("next.yaml", `version: 1
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
`)
	res := w.run("run", "next.yaml")
	if res.code != 0 {
		t.Fatalf("run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	stages := filepath.Join(w.dir, "runs", strings.TrimSpace(res.stdout), "stages")
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
