package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
)

// writeSplitSet writes a set of n ranks at root whose weight [rows*n, 2] is
// split along dimension 0, with a BatchNorm mean per rank, and returns the
// strategy file describing it (not written into the set).
func writeSplitSet(t *testing.T, root string, n, rows int) *parallel.StrategyFile {
	t.Helper()
	for r := range n {
		vals := make([]float32, rows*2)
		for i := range vals {
			vals[i] = float32(r*rows*2 + i)
		}
		w, _ := ckpt.NewFloat32("weight", []int64{int64(rows), 2}, vals)
		m, _ := ckpt.NewFloat32("moments.weight", []int64{int64(rows), 2}, make([]float32, rows*2))
		bn, _ := ckpt.NewFloat32("bn.moving_mean", []int64{2}, []float32{float32(r), 1})
		if _, err := ckptset.WriteRank(root, r, "CKP-2_156.ckpt", []ckpt.Tensor{w, m, bn}); err != nil {
			t.Fatal(err)
		}
	}
	return &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{
		"weight": {DeviceMatrix: []int{n, 1}, TensorMap: []int{1, -1}},
	}}
}

func writeStrategy(t *testing.T, path string, sf *parallel.StrategyFile) {
	t.Helper()
	if err := parallel.WriteStrategyFile(path, sf, parallel.FormatProto); err != nil {
		t.Fatal(err)
	}
}

func copyTestFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every example line in the help of the ckpt commands runs, in a directory
// holding the files the examples name (runs/<run-id>/... literally): the
// help's own `ckpt merge --plan` example used to fail, asking for -o.
func TestCkptHelpExamplesRun(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	train := filepath.Join("runs", "<run-id>", "stages", "train")
	sf4 := writeSplitSet(t, train, 4, 2)
	writeStrategy(t, filepath.Join(train, "strategy.ckpt"), sf4)
	writeStrategy(t, "strategy.ckpt", sf4)
	for r := range 4 {
		copyTestFile(t, ckptset.FilePath(train, r, "CKP-2_156.ckpt"), "rank"+string(rune('0'+r))+".ckpt")
	}
	copyTestFile(t, ckptset.FilePath(train, 0, "CKP-2_156.ckpt"), filepath.Join("ckpt_0", "CKP-2_156.ckpt"))
	copyTestFile(t, ckptset.FilePath(train, 0, "CKP-2_156.ckpt"), "old.ckpt")
	integrated := filepath.Join(t.TempDir(), "CKP-Integrated_1-4_32.ckpt")
	if code, _, stderr := runCkpt(t, "merge", train, "-o", integrated); code != ExitOK {
		t.Fatalf("fixture merge: %s", stderr)
	}
	copyTestFile(t, integrated, filepath.Base(integrated))
	// The integrated checkpoint's layout for 2 devices: weight split in two.
	writeStrategy(t, "train_strategy.ckpt", &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{
		"weight": {DeviceMatrix: []int{1, 1}, TensorMap: []int{1, -1}, Shape: []int{8, 2}},
	}})
	// 64 ranks to 56: weight [448, 2] in 7 and then 8 rows per rank.
	sf64 := writeSplitSet(t, "set64", 64, 7)
	writeStrategy(t, filepath.Join("set64", "strategy.ckpt"), sf64)
	writeStrategy(t, "strategy56.ckpt", &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{
		"weight": {DeviceMatrix: []int{56, 1}, TensorMap: []int{1, -1}},
	}})
	if code, _, stderr := runCkpt(t, "reshard", train, "--devices", "2", "-o", filepath.Join("runs", "<run-id>", "stages", "reshard", "checkpoints")); code != ExitOK {
		t.Fatalf("fixture reshard: %s", stderr)
	}

	ran := 0
	for _, sub := range []string{"inspect", "convert", "merge", "reshard", "verify"} {
		cmd, _, err := newCkptCmd().Find([]string{sub})
		if err != nil {
			t.Fatal(err)
		}
		// Lines ending in a backslash continue on the next one.
		example := strings.ReplaceAll(cmd.Example, "\\\n", " ")
		for _, line := range strings.Split(example, "\n") {
			line, _, _ = strings.Cut(line, "#")
			args := strings.Fields(strings.ReplaceAll(line, "'", ""))
			if len(args) == 0 {
				continue
			}
			if slices.Contains(args, "--model") {
				// Resharding to a model's training layout needs that
				// model's real checkpoint, which this fixture does not
				// build: such examples are not run here.
				continue
			}
			if len(args) < 3 || args[0] != "mspipe" || args[1] != "ckpt" {
				t.Errorf("%s: example %q does not start with mspipe ckpt", sub, line)
				continue
			}
			code, _, stderr := runCkpt(t, args[2:]...)
			if code != ExitOK {
				t.Errorf("example %q: exit %d: %s", strings.TrimSpace(line), code, stderr)
			}
			ran++
		}
	}
	if ran < 15 {
		t.Fatalf("ran %d examples, the help has more", ran)
	}
}
