package reshard

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// layoutBoxes is every rank's box of a MindSpore layout.
func layoutBoxes(t *testing.T, l parallel.Layout) []parallel.Box {
	t.Helper()
	boxes := make([]parallel.Box, l.Devices())
	for r := range boxes {
		b, err := l.Box(r)
		if err != nil {
			t.Fatal(err)
		}
		boxes[r] = b
	}
	return boxes
}

// TestSeedsScenario64To56: the seeds' stage 1 on 64 devices (8 hosts x 8)
// continued on 56 (7 x 8), with per-device BatchNorm statistics averaged.
func TestSeedsScenario64To56(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(64, 56))
	f32 := func(name string, shape ...int) ckpt.Tensor {
		v := make([]float32, volume(shape))
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return mustFloat32(t, name, fileDims(shape)[:len(shape)], v)
	}
	model := []ckpt.Tensor{
		f32("conv1.weight", 16, 3, 3, 3),
		f32("bn1.moving_mean", 16),
		f32("fc.weight", 112, 16),
		f32("embedding.table", 64, 4),
		f32("moments.conv1.weight", 16, 3, 3, 3),
		f32("moments.fc.weight", 112, 16),
		f32("moments.embedding.table", 64, 4),
		f32("learning_rate"),
		f32("momentum"),
		mustInt32(t, "global_step", 1875),
	}
	dm := []int{8, 8}
	layouts := map[string]parallel.Layout{
		"fc.weight":       {DeviceMatrix: dm, TensorMap: []int{1, 0}, Shape: []int{112, 16}},              // [14, 2] per rank
		"embedding.table": {DeviceMatrix: dm, TensorMap: []int{1, -1}, Shape: []int{64, 4}},               // rows by host, repeated on its 8 devices
		"conv1.weight":    {DeviceMatrix: dm, TensorMap: []int{0, -1, -1, -1}, Shape: []int{16, 3, 3, 3}}, // out channels by device
	}
	placements := make(map[string]Placement)
	for name, l := range layouts {
		placements[name] = Placement{Shape: l.Shape, Boxes: layoutBoxes(t, l)}
	}
	dir := t.TempDir()
	src := writeSourceSet(t, dir, model, placements, 64, ckpt.WriteOptions{})
	// Data-parallel BatchNorm: every device saw other data.
	bn := make([][]float32, 64)
	for r := range bn {
		bn[r] = floats(t, f32("bn1.moving_mean", 16))
		tensors, err := ckpt.Read(src.Files[r])
		if err != nil {
			t.Fatal(err)
		}
		for i := range tensors {
			if tensors[i].Name == "bn1.moving_mean" {
				tensors[i] = mustFloat32(t, "bn1.moving_mean", []int64{16}, bn[r])
			}
		}
		if err := ckpt.Write(src.Files[r], tensors, ckpt.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wantMean := make([]float32, 16)
	for i := range wantMean {
		var s float64
		for r := range 64 {
			s += float64(bn[r][i])
		}
		wantMean[i] = float32(s / 64)
	}

	target := TargetForDevices(src, 56)
	// The rule: fc.weight's rows (112 = 56 x 2) are split, the other
	// dimensions the source split are not divisible by 56: replicated.
	if p, ok := target.Placements["fc.weight"]; !ok || !slices.Equal(p.Boxes[55].Offset, []int{110, 0}) || !slices.Equal(p.Boxes[55].Shape, []int{2, 16}) {
		t.Fatalf("target fc.weight = %+v, want rows split 56 ways", p)
	}
	if _, ok := target.Placements["embedding.table"]; ok {
		t.Fatal("embedding.table (64 rows) was split 56 ways")
	}
	opt := Options{MaxMemory: 1 << 20, ReplicatedRule: RuleMean, VerifyCRC: true}
	plan, err := Plan(ctx, src, target, opt)
	if err != nil {
		t.Fatal(err)
	}
	// Every source byte of a distinct box is read once: fc.weight from all
	// 64 ranks, embedding.table from one rank per host.
	for _, tp := range plan.Tensors {
		if tp.Name == "embedding.table" && tp.ReadBytes != 64*4*4 {
			t.Fatalf("embedding.table reads %d bytes, want each of its 8 distinct slices once (%d)", tp.ReadBytes, 64*4*4)
		}
	}
	out := t.TempDir()
	m, err := Run(ctx, src, target, out, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 56 || m.Stats.PeakMemory > opt.MaxMemory {
		t.Fatalf("%d files, peak %d bytes; want 56 under %d", len(m.Files), m.Stats.PeakMemory, opt.MaxMemory)
	}
	want := slices.Clone(model)
	want[1] = mustFloat32(t, "bn1.moving_mean", []int64{16}, wantMean)
	checkSet(t, out, m, want, target)

	// And back to 64 with the original layout: the split tensors come back
	// bit for bit (the statistics are now the mean on every device).
	back := t.TempDir()
	mb, err := Run(ctx, m.Source(out), Target{Ranks: 64, Placements: placements}, back, Options{MaxMemory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, back, mb, want, Target{Ranks: 64, Placements: placements})
	if _, err := Verify(ctx, back, Options{}); err != nil {
		t.Fatal(err)
	}
}

func mustInt32(t *testing.T, name string, v int32) ckpt.Tensor {
	t.Helper()
	data := make([]byte, 4)
	for i := range 4 {
		data[i] = byte(uint32(v) >> (8 * i))
	}
	return ckpt.Tensor{Name: name, Dims: []int64{}, DType: ckpt.DTypeInt32, Data: data}
}

// TestMeanRuleKeepsEqualCopies: copies that agree are kept exactly, also
// values whose float64 sum is not exact in float32.
func TestMeanRuleKeepsEqualCopies(t *testing.T) {
	model := []ckpt.Tensor{mustFloat32(t, "bn.moving_var", []int64{3}, []float32{0.1, float32(math.Pi), 1e-30})}
	src := writeSourceSet(t, t.TempDir(), model, nil, 7, ckpt.WriteOptions{})
	out := t.TempDir()
	m, err := Run(context.Background(), src, Target{Ranks: 2}, out, Options{ReplicatedRule: RuleMean})
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, out, m, model, Target{Ranks: 2})
	if m.Tensors[0].Rule != RuleMean {
		t.Fatalf("rule = %q, want mean", m.Tensors[0].Rule)
	}
}

// TestMemoryCapHolds: a 4 MiB tensor resharded under a 256 KiB cap is
// processed in bands, and what the engine held never exceeds the cap.
func TestMemoryCapHolds(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	v := make([]float32, 1024*1024)
	for i := range v {
		v[i] = rng.Float32()
	}
	// big needs a scatter buffer (its source is split by columns), rows
	// after it does not: buffers sized for one must not add up with the
	// other's past the cap.
	model := []ckpt.Tensor{mustFloat32(t, "big", []int64{1024, 1024}, v), mustFloat32(t, "rows", []int64{4096, 256}, v)}
	shape := []int{1024, 1024}
	srcBoxes := layoutBoxes(t, parallel.Layout{DeviceMatrix: []int{2, 2}, TensorMap: []int{1, 0}, Shape: shape})
	src := writeSourceSet(t, t.TempDir(), model, map[string]Placement{
		"big":  {Shape: shape, Boxes: srcBoxes},
		"rows": {Shape: []int{4096, 256}, Boxes: rowBoxes([]int{4096, 256}, 4)},
	}, 4, ckpt.WriteOptions{})
	dstBoxes := []parallel.Box{ // uneven: 341, 341, 342 columns
		{Offset: []int{0, 0}, Shape: []int{1024, 341}},
		{Offset: []int{0, 341}, Shape: []int{1024, 341}},
		{Offset: []int{0, 682}, Shape: []int{1024, 342}},
	}
	target := Target{Ranks: 3, Placements: map[string]Placement{"big": {Shape: shape, Boxes: dstBoxes}}}
	const capBytes = 256 << 10
	opt := Options{MaxMemory: capBytes}
	plan, err := Plan(ctx, src, target, opt)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Tensors[0].Bands < 16 || plan.PeakMemory > capBytes {
		t.Fatalf("plan: %d bands, peak %d; want at least 16 bands under %d", plan.Tensors[0].Bands, plan.PeakMemory, capBytes)
	}
	var calls int
	var last, total int64
	opt.Progress = func(written, all int64) {
		if written < last || written > all {
			t.Errorf("progress %d of %d after %d", written, all, last)
		}
		calls, last, total = calls+1, written, all
	}
	out := t.TempDir()
	m, err := Run(ctx, src, target, out, opt)
	if err != nil {
		t.Fatal(err)
	}
	if calls < plan.Tensors[0].Bands || last != total || total != plan.WriteBytes {
		t.Fatalf("%d progress calls, last %d of %d; want one per band at least, ending at the plan's %d", calls, last, total, plan.WriteBytes)
	}
	if m.Stats.PeakMemory > capBytes || m.Stats.PeakMemory < capBytes/2 {
		t.Fatalf("held at most %d bytes, want under the cap %d and using it", m.Stats.PeakMemory, capBytes)
	}
	checkSet(t, out, m, model, target)

	if _, err := Run(ctx, src, target, t.TempDir(), Options{MaxMemory: 3*4096 + 1000}); !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), `tensor "big"`) {
		t.Fatalf("run with a cap below one row: err = %v, want ErrMemory naming big", err)
	}
}

// TestStrategyFileLayouts: placements from a strategy file's layouts
// (uneven param_split_shape, optimizer weight sharding) merge and reshard
// back bit for bit.
func TestStrategyFileLayouts(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	f32 := func(name string, shape ...int) ckpt.Tensor {
		v := make([]float32, volume(shape))
		for i := range v {
			v[i] = rng.Float32()
		}
		return mustFloat32(t, name, fileDims(shape)[:len(shape)], v)
	}
	model := []ckpt.Tensor{f32("embedding.table", 10, 3), f32("fc.weight", 16, 4), f32("moments.fc.weight", 16, 4), f32("learning_rate")}
	layouts := map[string]parallel.TensorLayout{
		// Manual split of the table's rows 3 + 7 over the 2 model-parallel slices.
		"embedding.table": {DeviceMatrix: []int{2, 2}, TensorMap: []int{0, -1}, ParamSplitShape: []int{3, 7}, IndicesOffset: []int{0, 3}},
		// Rows split 2 ways, each slice sharded again 2 ways by the parallel optimizer.
		"fc.weight": {DeviceMatrix: []int{2, 2}, TensorMap: []int{0, -1}, OptWeightShardStep: 2, OptWeightShardSize: 2},
	}
	placements := make(map[string]Placement)
	for _, x := range model {
		l, ok := layouts[x.Name]
		if !ok {
			continue
		}
		boxes, err := l.Boxes(intShape(x.Dims))
		if err != nil {
			t.Fatal(err)
		}
		placements[x.Name] = Placement{Shape: intShape(x.Dims), Boxes: boxes}
	}
	src := writeSourceSet(t, t.TempDir(), model, placements, 4, ckpt.WriteOptions{})
	one := t.TempDir()
	m, err := Merge(ctx, src, one, "merged.ckpt", Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, one, m, model, Target{Ranks: 1})
	back := t.TempDir()
	mb, err := Run(ctx, m.Source(one), Target{Ranks: 4, Placements: placements}, back, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, "4 -> 1 -> 4", src.Files, setFiles(back, mb))
}
