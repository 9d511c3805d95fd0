package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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
