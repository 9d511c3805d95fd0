package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
)

func TestCkptStrategyMerge(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "stra")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	// One file per rank of 2 stages x 2 devices, as MindSpore writes them.
	for r := range 4 {
		s := r / 2
		f := &parallel.StrategyFile{
			CurrentStage: s,
			Operators:    map[string][][]int{fmt.Sprintf("stage%d.matmul", s): {{2, 1}}},
			Layouts: map[string]parallel.TensorLayout{
				fmt.Sprintf("layer%d.weight", s): {DeviceMatrix: []int{2}, TensorMap: []int{0, -1}, OptWeightShardStep: 2, OptWeightShardSize: 1},
				"embedding":                      {DeviceMatrix: []int{2}, TensorMap: []int{-1, 0}},
			},
		}
		if err := parallel.WriteStrategyFile(filepath.Join(src, fmt.Sprintf("stra%d.ckpt", r)), f, parallel.FormatProto); err != nil {
			t.Fatal(err)
		}
	}
	for _, out := range []string{"merged.ckpt", "merged.json"} {
		out = filepath.Join(dir, out)
		code, stdout, stderr := runCkpt(t, "strategy", "merge", src, "-o", out)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if want := "merged 4 strategy files: 2 stages, 2 operators, 3 parameter layouts on 2 devices per stage"; !strings.Contains(stdout, want) {
			t.Fatalf("stdout %q lacks %q", stdout, want)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if json := strings.HasSuffix(out, ".json"); parallel.IsJSONStrategy(data) != json {
			t.Fatalf("%s: JSON form %v, want %v", out, !json, json)
		}
		f, err := parallel.ReadStrategyFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(f.Stages(), []int{0, 1}) || f.OperatorStage("stage1.matmul") != 1 || len(f.Layouts) != 3 {
			t.Fatalf("%s: stages %v, operator stages %v, %d layouts", out, f.Stages(), f.OperatorStages, len(f.Layouts))
		}
	}
	// Given as files, with --format, to the same bytes.
	files, _ := filepath.Glob(filepath.Join(src, "*.ckpt"))
	again := filepath.Join(dir, "again.bin")
	if code, _, stderr := runCkpt(t, append(append([]string{"strategy", "merge"}, files...), "-o", again, "--format", "proto")...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "merged.ckpt"))
	b, _ := os.ReadFile(again)
	if len(a) == 0 || string(a) != string(b) {
		t.Fatal("merging the files gave other bytes than merging their directory")
	}
	if code, _, stderr := runCkpt(t, "strategy", "merge", src); code != ExitUsage || !strings.Contains(stderr, "-o MERGED") {
		t.Fatalf("no -o: exit %d %q", code, stderr)
	}
	if code, _, stderr := runCkpt(t, "strategy", "merge", files[0], "-o", files[0]); code != ExitUsage || !strings.Contains(stderr, "is the input") {
		t.Fatalf("over an input: exit %d %q", code, stderr)
	}
}

// TestCkptReshardPipelineSet: a 2-stage set of 2 devices per stage, its
// per-stage strategy files in strategy/, resharded to 2 devices without
// stages and back with --target-strategy naming the per-stage directory,
// gives the source files back byte for byte.
func TestCkptReshardPipelineSet(t *testing.T) {
	root := t.TempDir()
	stra := filepath.Join(root, ckptset.StrategyDirName)
	if err := os.Mkdir(stra, 0o755); err != nil {
		t.Fatal(err)
	}
	var files []string
	for r := range 4 {
		s, local := r/2, r%2
		vals := make([]float32, 6)
		for i := range vals {
			vals[i] = float32(100*s + 6*local + i)
		}
		w, _ := ckpt.NewFloat32(fmt.Sprintf("layer%d.weight", s), []int64{2, 3}, vals)
		m, _ := ckpt.NewFloat32(fmt.Sprintf("moments.layer%d.weight", s), []int64{2, 3}, vals)
		lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
		p, err := ckptset.WriteRank(root, r, "CKP-1_4.ckpt", []ckpt.Tensor{w, m, lr})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
		f := &parallel.StrategyFile{CurrentStage: s, Operators: map[string][][]int{fmt.Sprintf("stage%d.matmul", s): {{2, 1}}},
			Layouts: map[string]parallel.TensorLayout{fmt.Sprintf("layer%d.weight", s): {DeviceMatrix: []int{2}, TensorMap: []int{0, -1}}}}
		if err := parallel.WriteStrategyFile(filepath.Join(stra, fmt.Sprintf("rank%d.ckpt", r)), f, parallel.FormatProto); err != nil {
			t.Fatal(err)
		}
	}
	flat := filepath.Join(t.TempDir(), "flat")
	if code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "-o", flat); code != 0 {
		t.Fatalf("to 2 devices: exit %d: %s", code, stderr)
	}
	back := filepath.Join(t.TempDir(), "back")
	if code, _, stderr := runCkpt(t, "reshard", flat, "--target-strategy", stra, "-o", back); code != 0 {
		t.Fatalf("back to the pipeline layout: exit %d: %s", code, stderr)
	}
	for r, want := range files {
		a, _ := os.ReadFile(want)
		b, err := os.ReadFile(ckptset.FilePath(back, r, "CKP-1_4.ckpt"))
		if err != nil || len(a) == 0 || string(a) != string(b) {
			t.Fatalf("rank %d: the round trip differs from the source (%v)", r, err)
		}
	}
	if code, stdout, stderr := runCkpt(t, "verify", back); code != 0 || !strings.Contains(stdout, "verified 4 files, 5 tensors") {
		t.Fatalf("verify: exit %d %s %s", code, stdout, stderr)
	}
}
