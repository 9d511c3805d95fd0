package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
)

// writeSeedsSet writes the seeds' 4-device example as a set: each rank holds
// a [2, 8] slice of weight and of moments.weight, its own BatchNorm mean and
// the shared learning rate.
func writeSeedsSet(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for r := range 4 {
		vals := make([]float32, 16)
		for i := range vals {
			vals[i] = float32(r*16 + i)
		}
		w, _ := ckpt.NewFloat32("weight", []int64{2, 8}, vals)
		m, _ := ckpt.NewFloat32("moments.weight", []int64{2, 8}, make([]float32, 16))
		bn, _ := ckpt.NewFloat32("bn.moving_mean", []int64{2}, []float32{float32(r), 1})
		lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
		path, err := ckptset.WriteRank(root, r, "CKP-1_4.ckpt", []ckpt.Tensor{w, m, bn, lr})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	return files
}

func TestCkptInspectSet(t *testing.T) {
	root := t.TempDir()
	files := writeSeedsSet(t, root)
	code, stdout, stderr := runCkpt(t, "inspect", root)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := "set: " + root + "\n" +
		"ranks: 4, tensors: 4, data bytes: 560\n"
	for r, f := range files {
		want += "rank " + string(rune('0'+r)) + ": " + f + " (4 tensors, 140 bytes, crc32: none)\n"
	}
	want += "\n" +
		"NAME            DTYPE    RANK SHAPES  BYTES  SPREAD\n" +
		"weight          Float32  (2, 8) x4    256    per-rank values\n" +
		"moments.weight  Float32  (2, 8) x4    256    replicated\n" +
		"bn.moving_mean  Float32  (2,) x4      32     per-rank values\n" +
		"learning_rate   Float32  () x4        16     replicated\n"
	if stdout != want {
		t.Fatalf("output:\n%s\nwant:\n%s", stdout, want)
	}

	// The same files named one by one give the same table, as JSON too.
	code, stdout, _ = runCkpt(t, "inspect", "--format", "json", files[0], files[1], files[2])
	var got setReport
	if err := json.Unmarshal([]byte(stdout), &got); code != ExitOK || err != nil {
		t.Fatalf("json: exit %d, %v\n%s", code, err, stdout)
	}
	if got.Set != "" || len(got.Ranks) != 3 || got.Bytes != 420 || got.Tensors[0].Spread != "per-rank values" || got.Tensors[0].Bytes != 192 {
		t.Fatalf("json report %+v", got)
	}
	if got.Tensors[3].Shapes[2] == nil || len(got.Tensors[3].Shapes[2]) != 0 {
		t.Fatalf("a scalar's shape must be [] per rank, got %v", got.Tensors[3].Shapes)
	}
}

func TestCkptInspectSetShapesAndGaps(t *testing.T) {
	root := t.TempDir()
	files := writeSeedsSet(t, root)
	// Rank 3 holds an uneven slice and lacks the learning rate.
	w, _ := ckpt.NewFloat32("weight", []int64{1, 8}, make([]float32, 8))
	if err := ckpt.Write(files[3], []ckpt.Tensor{w}, ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCkpt(t, "inspect", root)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, line := range []string{
		"weight          Float32  (2, 8) x3 (1, 8) x1  224    sliced",
		"learning_rate   Float32  () x3 - x1           12     partial",
	} {
		if !strings.Contains(stdout, line+"\n") {
			t.Fatalf("no line %q in\n%s", line, stdout)
		}
	}

	// A missing rank, a damaged rank file, a dtype that changes.
	if err := os.RemoveAll(filepath.Join(root, "device1")); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCkpt(t, "inspect", root); code != ExitUsage || !strings.Contains(stderr, "rank 1 is missing") {
		t.Fatalf("missing rank: exit %d %q", code, stderr)
	}
	// A copy of rank 0's file with the crc_num trailer, one bit flipped.
	t0, err := ckpt.Read(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.Write(files[2], t0, ckpt.WriteOptions{CRC: true}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(files[2])
	data[len(data)-1] ^= 1
	os.WriteFile(files[2], data, 0o644)
	if code, _, stderr := runCkpt(t, "inspect", files[0], files[2]); code != ExitFailed || !strings.Contains(stderr, "rank 1: "+files[2]+": ") || !strings.Contains(stderr, "crc32 mismatch") {
		t.Fatalf("damaged rank: exit %d %q", code, stderr)
	}
	i8 := ckpt.Tensor{Name: "weight", Dims: []int64{1}, DType: ckpt.DTypeInt8, Data: []byte{1}}
	odd := filepath.Join(t.TempDir(), "odd.ckpt")
	ckpt.Write(odd, []ckpt.Tensor{i8}, ckpt.WriteOptions{})
	if code, _, stderr := runCkpt(t, "inspect", files[0], odd); code != ExitFailed || !strings.Contains(stderr, odd+`: tensor "weight" is Int8, rank 0 has it as Float32`) {
		t.Fatalf("dtype change: exit %d %q", code, stderr)
	}
	if code, _, stderr := runCkpt(t, "inspect", files[0], root); code != ExitUsage || !strings.Contains(stderr, "is a directory") {
		t.Fatalf("file and dir: exit %d %q", code, stderr)
	}
}

func TestCkptInspectSetWithStrategy(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root)
	strategy := filepath.Join(t.TempDir(), "strategy.ckpt")
	sf := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{
		"weight": {DeviceMatrix: []int{4, 1}, TensorMap: []int{1, 0}},
	}}
	if err := parallel.WriteStrategyFile(strategy, sf, parallel.FormatProto); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCkpt(t, "inspect", root, "--strategy", strategy)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	table := stdout[strings.Index(stdout, "NAME"):]
	want := "NAME            DTYPE    RANK SHAPES  BYTES  SPREAD           SHAPE   LAYOUT\n" +
		"weight          Float32  (2, 8) x4    256    per-rank values  (8, 8)  dev_matrix [4 1] tensor_map [1 0]\n" +
		"moments.weight  Float32  (2, 8) x4    256    replicated       (8, 8)  dev_matrix [4 1] tensor_map [1 0]\n" +
		"bn.moving_mean  Float32  (2,) x4      32     per-rank values  (2,)    none (replicated)\n" +
		"learning_rate   Float32  () x4        16     replicated       ()      none (replicated)\n"
	if table != want {
		t.Fatalf("table:\n%s\nwant:\n%s", table, want)
	}

	// A layout for another device count, in the JSON form, is shown with
	// why it does not fit.
	sf.Layouts["weight"] = parallel.TensorLayout{DeviceMatrix: []int{2, 1}, TensorMap: []int{1, 0}}
	if err := parallel.WriteStrategyFile(strategy, sf, parallel.FormatJSON); err != nil {
		t.Fatal(err)
	}
	_, stdout, _ = runCkpt(t, "inspect", root, "--strategy", strategy)
	if !strings.Contains(stdout, "weight          Float32  (2, 8) x4    256    per-rank values  (4, 8)  dev_matrix [2 1] tensor_map [1 0] (the layout has 2 devices, the set 4 ranks)\n") {
		t.Fatalf("misfit not shown:\n%s", stdout)
	}
	if code, _, stderr := runCkpt(t, "inspect", root, "--strategy", filepath.Join(root, "nope.ckpt")); code != ExitUsage || !strings.Contains(stderr, "nope.ckpt") {
		t.Fatalf("missing strategy: exit %d %q", code, stderr)
	}
}
