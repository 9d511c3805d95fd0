package tests

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
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
}
