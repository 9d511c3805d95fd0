package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
)

// seedsStrategy writes the strategy of the seeds' 4-device example: weight
// [8, 8] split along dimension 0 over 4 devices.
func seedsStrategy(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "strategy.ckpt")
	sf := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{
		"weight":         {DeviceMatrix: []int{4, 1}, TensorMap: []int{1, 0}},
		"bn.moving_mean": {DeviceMatrix: []int{4, 1}, TensorMap: []int{-1}},
	}}
	if err := parallel.WriteStrategyFile(path, sf, parallel.FormatProto); err != nil {
		t.Fatal(err)
	}
	return path
}

func floats(t *testing.T, tensors []ckpt.Tensor, name string) ([]int64, []float32) {
	t.Helper()
	for _, x := range tensors {
		if x.Name == name {
			v, err := x.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			return x.Dims, v
		}
	}
	t.Fatalf("no tensor %q", name)
	return nil, nil
}

// TestCkptMergeSeedsExample merges the seeds' 4 slices of [2, 8] into the
// [8, 8] weight whose element i is i (writeSeedsSet numbers them so).
func TestCkptMergeSeedsExample(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root)
	seedsStrategy(t, root) // found by its name in the set directory
	out := filepath.Join(t.TempDir(), "merged", "CKP-Integrated_1-4_32.ckpt")
	code, stdout, stderr := runCkpt(t, "merge", root, "-o", out)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"source: " + root + " (4 ranks), layout from " + filepath.Join(root, "strategy.ckpt") + "\n",
		"rank 0: " + out + " (",
		"4 tensors (",
		"files re-read and checked against the CRC-32 of what was written; content hashes from the source's bytes; manifest: " + filepath.Join(filepath.Dir(out), "manifest.json") + "\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("output lacks %q:\n%s", want, stdout)
		}
	}
	// --verify-output sha256 reassembles every written tensor and checks
	// its hash, as mspipe ckpt verify does.
	again := filepath.Join(t.TempDir(), "again", "CKP-Integrated_1-4_32.ckpt")
	if code, stdout, stderr := runCkpt(t, "merge", root, "-o", again, "--verify-output", "sha256"); code != ExitOK ||
		!strings.Contains(stdout, "every tensor re-read from the written files and its content hash checked against the source's") {
		t.Fatalf("--verify-output sha256: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := runCkpt(t, "merge", root, "-o", again, "--verify-output", "md5"); code == ExitOK || !strings.Contains(stderr, `--verify-output "md5": want crc or sha256`) {
		t.Errorf("--verify-output md5: exit %d, %s", code, stderr)
	}
	got, err := ckpt.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	dims, w := floats(t, got.Tensors, "weight")
	if !slices.Equal(dims, []int64{8, 8}) || got.CRC {
		t.Fatalf("weight dims %v, crc %v (want no trailer by default)", dims, got.CRC)
	}
	if vals := ckpttest.DecodeFile(t, out); len(vals) != got.Values {
		t.Fatalf("protoc decoded %d values, ckpt %d", len(vals), got.Values)
	}
	for i, v := range w {
		if v != float32(i) {
			t.Fatalf("weight[%d] = %v, want %d", i, v, i)
		}
	}
	if dims, m := floats(t, got.Tensors, "moments.weight"); !slices.Equal(dims, []int64{8, 8}) || len(m) != 64 {
		t.Fatalf("moments.weight follows weight: dims %v", dims)
	}
	// bn.moving_mean is replicated with per-rank values: rank 0's by default.
	if _, bn := floats(t, got.Tensors, "bn.moving_mean"); bn[0] != 0 || bn[1] != 1 {
		t.Fatalf("bn.moving_mean = %v, want rank 0's [0 1]", bn)
	}
	if code, stdout, stderr := runCkpt(t, "verify", filepath.Dir(out)); code != ExitOK || !strings.Contains(stdout, "verified 1 files, 4 tensors") {
		t.Fatalf("verify: exit %d %q %q", code, stdout, stderr)
	}

	// --bn-stats mean averages the four ranks' statistics: (0+1+2+3)/4.
	mean := filepath.Join(t.TempDir(), "mean.ckpt")
	strategy := filepath.Join(root, "strategy.ckpt")
	noBN := filepath.Join(t.TempDir(), "strategy.json")
	sf, _ := parallel.ReadStrategyFile(strategy)
	delete(sf.Layouts, "bn.moving_mean")
	parallel.WriteStrategyFile(noBN, sf, parallel.FormatJSON)
	if code, _, stderr := runCkpt(t, "merge", root, "--strategy", noBN, "--bn-stats", "mean", "-o", mean); code != ExitOK {
		t.Fatalf("mean: exit %d: %s", code, stderr)
	}
	m, _ := ckpt.Read(mean)
	if _, bn := floats(t, m, "bn.moving_mean"); math.Abs(float64(bn[0])-1.5) > 0 || bn[1] != 1 {
		t.Fatalf("bn.moving_mean with --bn-stats mean = %v, want [1.5 1]", bn)
	}
}

// TestCkptReshardSeedsExample splits the seeds' set for 2 devices: [4, 8]
// each, with the target strategy file and the layout npu/train's init:
// reads; resharding that back to 4 gives the original slices bit for bit.
func TestCkptReshardSeedsExample(t *testing.T) {
	root := t.TempDir()
	files := writeSeedsSet(t, root)
	seedsStrategy(t, root)
	out := filepath.Join(t.TempDir(), "two")

	code, stdout, stderr := runCkpt(t, "reshard", root, "--devices", "2", "--plan")
	if code != ExitOK {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"plan: 4 ranks -> 2 ranks\n",
		"rank 0: device0/ckpt_0/CKP-1_4.ckpt (",
		"weight ", "0->0 [0:2, 0:8], 1->0 [2:4, 0:8], 2->1 [4:6, 0:8], 3->1 [6:8, 0:8]",
	} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("plan lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("--plan wrote %s", out)
	}

	if code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "-o", out); code != ExitOK {
		t.Fatalf("reshard: exit %d: %s", code, stderr)
	}
	for r := range 2 {
		got, err := ckpt.Read(ckptset.FilePath(out, r, "CKP-1_4.ckpt"))
		if err != nil {
			t.Fatal(err)
		}
		dims, w := floats(t, got, "weight")
		if !slices.Equal(dims, []int64{4, 8}) || w[0] != float32(32*r) || w[31] != float32(32*r+31) {
			t.Fatalf("rank %d weight %v: %v", r, dims, w)
		}
	}
	sf, err := parallel.ReadStrategyFile(filepath.Join(out, "strategy.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	if l := sf.Layouts["weight"]; sf.Devices() != 2 || !slices.Equal(l.TensorMap, []int{0, -1}) {
		t.Fatalf("target strategy %+v", sf.Layouts)
	}
	if found, err := ckptset.Find(out, ""); err != nil || len(found) != 2 {
		t.Fatalf("the output is not a set npu/train can read: %v %v", found, err)
	}

	// Back to 4 ranks with the original strategy as the target: the same
	// tensors as the source, rank by rank.
	back := filepath.Join(t.TempDir(), "four")
	code, _, stderr = runCkpt(t, "reshard", out, "--target-strategy", filepath.Join(root, "strategy.ckpt"), "-o", back, "--format", "json")
	if code != ExitOK {
		t.Fatalf("reshard back: exit %d: %s", code, stderr)
	}
	for r, f := range files {
		want, _ := ckpt.Read(f)
		got, err := ckpt.Read(ckptset.FilePath(back, r, "CKP-1_4.ckpt"))
		if err != nil {
			t.Fatal(err)
		}
		// bn.moving_mean is rank 0's everywhere now: compare the rest.
		if err := ckpt.Compare(without(want, "bn.moving_mean"), without(got, "bn.moving_mean")); err != nil {
			t.Fatalf("rank %d after 4 -> 2 -> 4: %v", r, err)
		}
	}
}

func without(ts []ckpt.Tensor, name string) []ckpt.Tensor {
	var out []ckpt.Tensor
	for _, t := range ts {
		if t.Name != name {
			out = append(out, t)
		}
	}
	return out
}

func TestCkptReshardErrors(t *testing.T) {
	root := t.TempDir()
	files := writeSeedsSet(t, root)
	strategy := seedsStrategy(t, t.TempDir())
	out := filepath.Join(t.TempDir(), "out")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"reshard", root, "-o", out}, ExitUsage, "give the target as --devices M or --target-strategy FILE"},
		{[]string{"reshard", root, "--devices", "2", "--target-strategy", strategy, "-o", out}, ExitUsage, "(one of them)"},
		{[]string{"reshard", root, "--devices", "2"}, ExitUsage, "-o OUT_DIR"},
		{[]string{"reshard", root, "--devices", "2", "-o", out, "--max-memory", "lots"}, ExitUsage, `--max-memory: "lots"`},
		{[]string{"reshard", root, "--devices", "2", "-o", out, "--bn-stats", "median"}, ExitUsage, `--bn-stats "median"`},
		{[]string{"merge", root}, ExitUsage, "-o OUT.ckpt"},
		{[]string{"merge", filepath.Join(root, "nope"), "-o", out + ".ckpt"}, ExitUsage, "no such file"},
		// The strategy says 4 devices, three files are given.
		{[]string{"merge", files[0], files[1], files[2], "--strategy", strategy, "-o", out + ".ckpt"}, ExitFailed, "strategy file is for 4 devices, the set has 3 ranks"},
		// A cap too small for one row of the weight.
		{[]string{"merge", root, "--strategy", strategy, "--max-memory", "8B", "-o", out + ".ckpt"}, ExitFailed, "memory"},
		{[]string{"verify", t.TempDir()}, ExitUsage, "manifest.json"},
	}
	for _, tc := range cases {
		code, _, stderr := runCkpt(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(out), "manifest.json")); !os.IsNotExist(err) {
		t.Fatal("a failed merge left a manifest")
	}

	// A damaged rank file is named, and verify catches a changed output.
	good := filepath.Join(t.TempDir(), "good")
	if code, _, stderr := runCkpt(t, "reshard", root, "--strategy", strategy, "--devices", "2", "-o", good); code != ExitOK {
		t.Fatalf("reshard: %s", stderr)
	}
	outFile := ckptset.FilePath(good, 1, "CKP-1_4.ckpt")
	data, _ := os.ReadFile(outFile)
	data[len(data)/2] ^= 0xff
	os.WriteFile(outFile, data, 0o644)
	if code, _, stderr := runCkpt(t, "verify", good); code != ExitFailed || !strings.Contains(stderr, outFile) {
		t.Fatalf("verify of a damaged set: exit %d %q", code, stderr)
	}
	os.WriteFile(files[2], data[:len(data)/3], 0o644)
	if code, _, stderr := runCkpt(t, "merge", root, "--strategy", strategy, "-o", out+".ckpt"); code != ExitFailed || !strings.Contains(stderr, files[2]) {
		t.Fatalf("truncated rank: exit %d %q", code, stderr)
	}
	var m map[string]any
	if code, stdout, _ := runCkpt(t, "verify", "--format", "json", good); code == ExitOK {
		json.Unmarshal([]byte(stdout), &m)
		t.Fatalf("verify passed a damaged set: %v", m)
	}
}

// TestCkptReshardIndivisible: the seeds' [8, 8] weight to 3 devices does
// not divide. By default the command refuses, saying what to pass; with
// --indivisible split it cuts 3, 3 and 2 rows, writes no strategy.ckpt
// (none can describe that) and prints bytes in and out.
func TestCkptReshardIndivisible(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root)
	seedsStrategy(t, root)
	out := filepath.Join(t.TempDir(), "three")
	code, _, stderr := runCkpt(t, "reshard", root, "--devices", "3", "-o", out)
	if code != ExitFailed || !strings.Contains(stderr, `tensor "weight" [8 8]: dimension 0 (8) does not split into 3 equal slices`) ||
		!strings.Contains(stderr, "(2, 4, 8)") || !strings.Contains(stderr, "(--indivisible, --devices)") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a refused reshard created its output directory")
	}
	code, stdout, stderr := runCkpt(t, "reshard", root, "--devices", "3", "--indivisible", "split", "-o", out)
	if code != ExitOK || !strings.Contains(stderr, "note: 1 tensors split unevenly (weight)") || !strings.Contains(stdout, " (4 source files), out ") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "strategy.ckpt")); err == nil {
		t.Fatal("strategy.ckpt written for uneven slices")
	}
	files, err := ckptset.Find(out, "")
	if err != nil || len(files) != 3 {
		t.Fatalf("set %v: %v", files, err)
	}
	for r, rows := range []int64{3, 3, 2} {
		got, err := ckpt.Read(files[r])
		if err != nil {
			t.Fatal(err)
		}
		dims, w := floats(t, got, "weight")
		if dims[0] != rows || w[0] != float32(8*[]int64{0, 3, 6}[r]) {
			t.Fatalf("rank %d: weight %v starting %v", r, dims, w[0])
		}
	}
	if code, _, stderr := runCkpt(t, "merge", out, "-o", filepath.Join(t.TempDir(), "back.ckpt")); code != ExitOK {
		t.Fatalf("merging the uneven set back: %s", stderr)
	}
}

// TestCkptReshardToTheNextTraining: the seeds' merged [8, 8] weight is not
// a parameter of semi_auto_net, so --model refuses the set, naming what
// differs; a checkpoint of semi_auto_net's parameters is cut into exactly
// the slices semi_auto_net's ranks hold under the given strategy, and the
// strategy file beside them is the one that training writes.
func TestCkptReshardToTheNextTraining(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root)
	seedsStrategy(t, root)
	code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "--model", "semi_auto_net", "--mode", "semi_auto_parallel", "-o", t.TempDir())
	if code != ExitFailed || !strings.Contains(stderr, "the checkpoint is not one of this model") || !strings.Contains(stderr, "fc.weight") {
		t.Fatalf("a set of another model: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "--mode", "semi_auto_parallel", "-o", t.TempDir()); code != ExitUsage || !strings.Contains(stderr, "give its --model too") {
		t.Fatalf("--mode without --model: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "--model", "semi_auto_net", "--op-strategy", "fc.matmul", "-o", t.TempDir()); code != ExitUsage || !strings.Contains(stderr, "want OP=[[splits...],...]") {
		t.Fatalf("a bad --op-strategy: exit %d: %s", code, stderr)
	}

	// semi_auto_net's parameters (fc.weight [3072 128], end_point.weight
	// [10 128], end_point.bias [10]) with their moments, whole.
	var tensors []ckpt.Tensor
	for _, p := range []struct {
		name string
		dims []int64
	}{{"fc.weight", []int64{3072, 128}}, {"end_point.weight", []int64{10, 128}}, {"end_point.bias", []int64{10}}} {
		n := 1
		for _, d := range p.dims {
			n *= int(d)
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i % 977)
		}
		w, _ := ckpt.NewFloat32(p.name, p.dims, v)
		m, _ := ckpt.NewFloat32("moments."+p.name, p.dims, v)
		tensors = append(tensors, w, m)
	}
	whole := filepath.Join(t.TempDir(), "CKP-1_4.ckpt")
	if err := ckpt.Write(whole, tensors, ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "next")
	code, stdout, stderr := runCkpt(t, "reshard", whole, "--devices", "2", "--model", "semi_auto_net", "--mode", "semi_auto_parallel",
		"--op-strategy", "fc.matmul=[[1,1],[1,2]]", "--batch-size", "4", "-o", out)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	sf, err := parallel.ReadStrategyFile(filepath.Join(out, "strategy.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	if l := sf.Layouts["fc.weight"]; !slices.Equal(l.TensorMap, []int{-1, 0}) || l.Devices() != 2 || !slices.Equal(sf.Operators["fc.matmul"][1], []int{1, 2}) {
		t.Fatalf("strategy file: fc.weight %+v, fc.matmul %v", l, sf.Operators["fc.matmul"])
	}
	files, err := ckptset.Find(out, "")
	if err != nil || len(files) != 2 {
		t.Fatalf("set %v: %v", files, err)
	}
	for r, f := range files {
		got, err := ckpt.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		dims, w := floats(t, got, "fc.weight")
		if !slices.Equal(dims, []int64{3072, 64}) || w[1] != float32((64*r+1)%977) {
			t.Fatalf("rank %d: fc.weight %v, w[0][1] = %v", r, dims, w[1])
		}
		if dims, _ := floats(t, got, "end_point.weight"); !slices.Equal(dims, []int64{10, 128}) {
			t.Fatalf("rank %d: end_point.weight %v, want whole (end_point runs data parallel)", r, dims)
		}
	}

	// With --parallel-optimizer, data_parallel on 2 devices: every
	// parameter's update is split in halves along dimension 0, so each
	// rank gets its half of the weights and the moments.
	if code, _, stderr := runCkpt(t, "reshard", whole, "--devices", "2", "--model", "semi_auto_net", "--mode", "data_parallel", "--optimizer-weight-shard-size", "2", "-o", t.TempDir()); code != ExitUsage || !strings.Contains(stderr, "needs --parallel-optimizer") {
		t.Fatalf("a shard size without --parallel-optimizer: exit %d: %s", code, stderr)
	}
	pieces := filepath.Join(t.TempDir(), "pieces")
	if code, stdout, stderr := runCkpt(t, "reshard", whole, "--devices", "2", "--model", "semi_auto_net", "--mode", "data_parallel", "--parallel-optimizer", "-o", pieces); code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if sf, err = parallel.ReadStrategyFile(filepath.Join(pieces, "strategy.ckpt")); err != nil {
		t.Fatal(err)
	}
	if l := sf.Layouts["fc.weight"]; l.OptWeightShardStep != 1 || l.OptWeightShardSize != 2 {
		t.Fatalf("strategy file: fc.weight %+v, want opt_weight_shard_step 1 and opt_weight_shard_size 2", l)
	}
	if files, err = ckptset.Find(pieces, ""); err != nil || len(files) != 2 {
		t.Fatalf("set %v: %v", files, err)
	}
	for r, f := range files {
		got, err := ckpt.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"fc.weight", "moments.fc.weight"} {
			dims, w := floats(t, got, name)
			if !slices.Equal(dims, []int64{1536, 128}) || w[0] != float32(1536*128*r%977) {
				t.Fatalf("rank %d: %s %v, w[0][0] = %v; want rows %d on of [3072 128]", r, name, dims, w[0], 1536*r)
			}
		}
		if dims, _ := floats(t, got, "end_point.weight"); !slices.Equal(dims, []int64{5, 128}) {
			t.Fatalf("rank %d: end_point.weight %v, want its half [5 128]", r, dims)
		}
	}

	// With --pipeline-stages 2 on 2 devices: fc on stage 0 (rank 0),
	// end_point on stage 1 (rank 1), each rank holding its stage's only.
	if code, _, stderr := runCkpt(t, "reshard", whole, "--devices", "2", "--pipeline-stages", "2", "-o", t.TempDir()); code != ExitUsage || !strings.Contains(stderr, "give its --model too") {
		t.Fatalf("--pipeline-stages without --model: exit %d: %s", code, stderr)
	}
	staged := filepath.Join(t.TempDir(), "staged")
	if code, stdout, stderr := runCkpt(t, "reshard", whole, "--devices", "2", "--model", "semi_auto_net", "--mode", "semi_auto_parallel",
		"--pipeline-stages", "2", "--micro-size", "2", "--batch-size", "4", "-o", staged); code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	if sf, err = parallel.ReadStrategyFile(filepath.Join(staged, "strategy.ckpt")); err != nil {
		t.Fatal(err)
	}
	if got := sf.Stages(); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("strategy file of stages %v, want [0 1]", got)
	}
	if files, err = ckptset.Find(staged, ""); err != nil || len(files) != 2 {
		t.Fatalf("set %v: %v", files, err)
	}
	for r, want := range []string{"fc.weight", "end_point.weight"} {
		got, err := ckpt.Read(files[r])
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range got {
			if !strings.HasPrefix(g.Name, "moments.") && strings.Contains(g.Name, ".weight") {
				names = append(names, g.Name)
			}
		}
		if !slices.Equal(names, []string{want}) {
			t.Fatalf("rank %d (stage %d) holds weights %v, want %s only", r, r, names, want)
		}
	}
}
