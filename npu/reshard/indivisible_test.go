package reshard

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// rowModel is a [rows, 3] float32 weight with its moments, a replicated
// bias and a scalar, with distinct values everywhere.
func rowModel(t *testing.T, rows int) []ckpt.Tensor {
	t.Helper()
	w, m := make([]float32, rows*3), make([]float32, rows*3)
	for i := range w {
		w[i], m[i] = float32(i)+0.5, -float32(i)
	}
	return []ckpt.Tensor{
		mustFloat32(t, "fc.weight", []int64{int64(rows), 3}, w),
		mustFloat32(t, "moments.fc.weight", []int64{int64(rows), 3}, m),
		mustFloat32(t, "fc.bias", []int64{3}, []float32{1, 2, 3}),
		mustFloat32(t, "learning_rate", nil, []float32{0.1}),
	}
}

// rowSource writes model's fc.weight split over ranks by rows as
// numpy.array_split cuts them (empty slices past the rows).
func rowSource(t *testing.T, model []ckpt.Tensor, ranks int) Source {
	t.Helper()
	shape := intShape(model[0].Dims)
	placements := map[string]Placement{"fc.weight": {Shape: shape, Boxes: arraySplit(shape, 0, ranks)}}
	return writeSourceSet(t, t.TempDir(), model, placements, ranks, ckpt.WriteOptions{})
}

func sumFileBytes(m *Manifest) int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Bytes
	}
	return n
}

// TestFiveRowsOverEightRanks: a 5-row tensor over 8 ranks (ranks 5-7 hold
// empty slices) merges exactly, reshards to 3 ranks unevenly (2, 2, 1 rows)
// exactly, and back to the 8-rank files byte for byte.
func TestFiveRowsOverEightRanks(t *testing.T) {
	ctx := context.Background()
	model := rowModel(t, 5)
	src := rowSource(t, model, 8)
	for r := 5; r < 8; r++ {
		if got := readTensors(t, src.Files[r])["fc.weight"]; len(got.Data) != 0 || got.Dims[0] != 0 {
			t.Fatalf("rank %d holds %v, want an empty slice", r, got.Dims)
		}
	}
	merged := t.TempDir()
	mm, err := Merge(ctx, src, merged, "whole.ckpt", Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, merged, mm, model, Target{Ranks: 1})

	if _, _, err := DevicesTarget(src, 3, ""); !errors.Is(err, ErrIndivisible) {
		t.Fatalf("5 rows to 3 devices by default: %v, want ErrIndivisible", err)
	}
	target, uneven, err := DevicesTarget(src, 3, IndivisibleSplit)
	if err != nil || len(uneven) != 1 || uneven[0] != "fc.weight" {
		t.Fatalf("split rule: uneven %v, %v", uneven, err)
	}
	out := t.TempDir()
	m3, err := Run(ctx, src, target, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, out, m3, model, target)
	if rows := []int{m3.Tensors[0].Boxes[0].Shape[0], m3.Tensors[0].Boxes[1].Shape[0], m3.Tensors[0].Boxes[2].Shape[0]}; rows[0] != 2 || rows[1] != 2 || rows[2] != 1 {
		t.Fatalf("rows per rank %v, want [2 2 1]", rows)
	}
	back := t.TempDir()
	mb, err := Run(ctx, m3.Source(out), Target{Ranks: 8, Placements: src.Placements}, back, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, "8 -> 3 -> 8", src.Files, setFiles(back, mb))
}

// TestEightToFiveOfSixteenRows: 16 rows over 8 ranks to 5 devices. The
// default refuses, naming the device counts that divide and the two other
// rules; split is exact and writes no more than the tensors plus the
// replicated ones' copies; replicate writes 5 copies, and says so in bytes.
func TestEightToFiveOfSixteenRows(t *testing.T) {
	ctx := context.Background()
	model := rowModel(t, 16)
	src := rowSource(t, model, 8)
	_, _, err := DevicesTarget(src, 5, IndivisibleRefuse)
	for _, want := range []string{`tensor "fc.weight" [16 3]`, "does not split into 5 equal slices", "(2, 4, 8, 16)", `"split" (uneven slices of 3 to 4 rows`, `"replicate" (the tensor whole on every rank, 5 copies)`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %v, want it to say %q", err, want)
		}
	}
	if _, _, err := DevicesTarget(src, 5, "sometimes"); err == nil {
		t.Fatal("an unknown rule was accepted")
	}

	target, _, err := DevicesTarget(src, 5, IndivisibleSplit)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Plan(ctx, src, target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	m, err := Run(ctx, src, target, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkSet(t, out, m, model, target)
	// Split tensors once in all, replicated ones once per rank.
	var data int64
	for _, x := range model {
		if _, placed := lookupPlacement(target.Placements, x.Name); placed {
			data += int64(len(x.Data))
		} else {
			data += 5 * int64(len(x.Data))
		}
	}
	var written int64
	for _, tp := range plan.Tensors {
		written += tp.WriteBytes
	}
	if written != data || sumFileBytes(m) != plan.WriteBytes || plan.WriteBytes > plan.SourceBytes {
		t.Fatalf("split: %d data bytes written, want %d; files %d bytes, plan %d, source %d", written, data, sumFileBytes(m), plan.WriteBytes, plan.SourceBytes)
	}
	if s := SizeSummary(plan); !strings.Contains(s, " in (8 files), ") || !strings.Contains(s, " out (5 files)") {
		t.Fatalf("summary %q", s)
	}

	rep, uneven, err := DevicesTarget(src, 5, IndivisibleReplicate)
	if err != nil || len(uneven) != 0 {
		t.Fatal(uneven, err)
	}
	rplan, err := Plan(ctx, src, rep, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var all, rwritten int64
	for _, x := range model {
		all += int64(len(x.Data))
	}
	for _, tp := range rplan.Tensors {
		rwritten += tp.WriteBytes
	}
	if rwritten != 5*all || rplan.WriteBytes <= plan.WriteBytes {
		t.Fatalf("replicate writes %d data bytes (%d in files), want 5 copies of %d", rwritten, rplan.WriteBytes, all)
	}
}

func TestArraySplit(t *testing.T) {
	got := arraySplit([]int{5, 2}, 0, 8)
	want := []parallel.Box{}
	off := 0
	for r, rows := range []int{1, 1, 1, 1, 1, 0, 0, 0} {
		want = append(want, parallel.Box{Offset: []int{off, 0}, Shape: []int{rows, 2}})
		off += rows
		if !sameBox(got[r], want[r]) {
			t.Fatalf("rank %d: %+v, want %+v", r, got[r], want[r])
		}
	}
	if d := commonDivisors([]int{16, 24}); len(d) != 3 || d[2] != 8 {
		t.Fatalf("common divisors of 16 and 24: %v", d)
	}
}
