package reshard

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckpt/ckpttest"
	"github.com/mspipe/mspipe/npu/parallel"
)

// extract returns box of a whole tensor's bytes (ckpttest.BoxBytes).
func extract(whole ckpt.Tensor, box parallel.Box) []byte {
	elem, _ := ckpt.DTypeSize(whole.DType)
	return ckpttest.BoxBytes(whole.Data, whole.Dims, elem, box.Offset, box.Shape)
}

// randomPlacement splits shape into parts boxes (parts divides ranks) with
// uneven cuts, each box held by ranks/parts ranks in a random rank order.
// With empty set, cuts may coincide or sit at the ends, so some boxes hold
// no element (size-0 chunks, as DCP and MindSpore sets can contain).
func randomPlacement(rng *rand.Rand, shape []int, parts, ranks int, empty bool) []parallel.Box {
	cuts := make([]int, len(shape)) // how many pieces each dim is cut into
	for i := range cuts {
		cuts[i] = 1
	}
	for p := parts; p > 1; {
		f := 2
		for p%f != 0 {
			f++
		}
		cuts[rng.IntN(len(shape))] *= f
		p /= f
	}
	bounds := make([][]int, len(shape)) // per dim: cut points 0 = b0 < b1 < ... = size
	for d, n := range shape {
		var pts []int
		if empty {
			for range cuts[d] - 1 {
				pts = append(pts, rng.IntN(n+1))
			}
		} else {
			pts = rng.Perm(n - 1)[:cuts[d]-1]
			for i := range pts {
				pts[i]++
			}
		}
		slices.Sort(pts)
		bounds[d] = append(append([]int{0}, pts...), n)
	}
	var boxes []parallel.Box
	idx := make([]int, len(shape))
	for {
		b := parallel.Box{Offset: make([]int, len(shape)), Shape: make([]int, len(shape))}
		for d := range shape {
			b.Offset[d] = bounds[d][idx[d]]
			b.Shape[d] = bounds[d][idx[d]+1] - b.Offset[d]
		}
		boxes = append(boxes, b)
		d := len(shape) - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < cuts[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			break
		}
	}
	out := make([]parallel.Box, ranks)
	for i, r := range rng.Perm(ranks) {
		out[r] = boxes[i%parts]
	}
	return out
}

func divisors(n int) []int {
	var ds []int
	for d := 1; d <= n; d++ {
		if n%d == 0 {
			ds = append(ds, d)
		}
	}
	return ds
}

// randomModel is a set of whole tensors with random shapes and dtypes:
// split parameters with their moments, a replicated tensor and scalars.
func randomModel(rng *rand.Rand, maxParts int) []ckpt.Tensor {
	dtypes := []string{ckpt.DTypeFloat32, ckpt.DTypeFloat16, ckpt.DTypeInt8, ckpt.DTypeInt64, ckpt.DTypeBFloat16}
	var model []ckpt.Tensor
	add := func(name string, shape []int, dtype string) {
		elem, _ := ckpt.DTypeSize(dtype)
		data := make([]byte, volume(shape)*int64(elem))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		model = append(model, ckpt.Tensor{Name: name, Dims: fileDims(shape)[:len(shape)], DType: dtype, Data: data})
	}
	for i := range 1 + rng.IntN(3) {
		shape := make([]int, 1+rng.IntN(3))
		for d := range shape {
			shape[d] = maxParts + rng.IntN(7) // room for any cut
		}
		dtype := dtypes[rng.IntN(len(dtypes))]
		add(fmt.Sprintf("layer%d.weight", i), shape, dtype)
		add(fmt.Sprintf("moments.layer%d.weight", i), shape, dtype)
	}
	// Fewer rows than most splits have parts: empty slices.
	tiny := []int{1 + rng.IntN(3), 1 + rng.IntN(3)}
	add("tiny.weight", tiny, ckpt.DTypeFloat32)
	add("moments.tiny.weight", tiny, ckpt.DTypeFloat32)
	add("bn.moving_mean", []int{1 + rng.IntN(5)}, ckpt.DTypeFloat32)
	add("empty", []int{0, 1 + rng.IntN(3)}, ckpt.DTypeFloat32)
	add("learning_rate", nil, ckpt.DTypeFloat32)
	add("global_step", nil, ckpt.DTypeInt32)
	return model
}

// randomLayout places the split parameters of model on ranks devices.
func randomLayout(rng *rand.Rand, model []ckpt.Tensor, ranks int) map[string]Placement {
	placements := make(map[string]Placement)
	for _, x := range model {
		if len(x.Dims) == 0 || x.Name == "bn.moving_mean" || x.Name == "empty" || strings.HasPrefix(x.Name, "moments.") {
			continue
		}
		ds := divisors(ranks)
		parts := ds[rng.IntN(len(ds))]
		shape := intShape(x.Dims)
		placements[x.Name] = Placement{Shape: shape, Boxes: randomPlacement(rng, shape, parts, ranks, x.Name == "tiny.weight" || rng.IntN(4) == 0)}
	}
	return placements
}

// writeSourceSet writes model placed on ranks files in dir.
func writeSourceSet(t *testing.T, dir string, model []ckpt.Tensor, placements map[string]Placement, ranks int, opts ckpt.WriteOptions) Source {
	t.Helper()
	src := Source{Placements: placements}
	for r := range ranks {
		var tensors []ckpt.Tensor
		for _, x := range model {
			p, placed := lookupPlacement(placements, x.Name)
			if !placed {
				tensors = append(tensors, x)
				continue
			}
			box := p.Boxes[r]
			tensors = append(tensors, ckpt.Tensor{Name: x.Name, Dims: fileDims(box.Shape), DType: x.DType, Data: extract(x, box)})
		}
		path := filepath.Join(dir, fmt.Sprintf("rank_%d.ckpt", r))
		if err := ckpt.Write(path, tensors, opts); err != nil {
			t.Fatal(err)
		}
		src.Files = append(src.Files, path)
	}
	return src
}

// checkSet checks that the files of a run hold model placed as target says.
func checkSet(t *testing.T, dir string, m *Manifest, model []ckpt.Tensor, target Target) {
	t.Helper()
	for r, f := range m.Files {
		got := readTensors(t, filepath.Join(dir, f.Path))
		if len(got) != len(model) {
			t.Fatalf("rank %d holds %d tensors, want %d", r, len(got), len(model))
		}
		for _, x := range model {
			box := wholeBox(intShape(x.Dims))
			if p, placed := lookupPlacement(target.Placements, x.Name); placed {
				box = p.Boxes[r]
			}
			g := got[x.Name]
			if g.DType != x.DType || !slices.Equal(intShape(g.Dims), box.Shape) || !bytes.Equal(g.Data, extract(x, box)) {
				t.Fatalf("rank %d: tensor %s = %s %v, want %s box %v", r, x.Name, g.DType, g.Dims, x.DType, box)
			}
		}
	}
	for i, x := range model {
		if m.Tensors[i].Name != x.Name || m.Tensors[i].SHA256 != x.Hash() {
			t.Fatalf("manifest tensor %d: %s %s, want %s %s", i, m.Tensors[i].Name, m.Tensors[i].SHA256, x.Name, x.Hash())
		}
	}
}

func sameFiles(t *testing.T, what string, a, b []string) {
	t.Helper()
	for r := range a {
		x, err1 := os.ReadFile(a[r])
		y, err2 := os.ReadFile(b[r])
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Fatalf("%s: rank %d: %s and %s differ (%v %v)", what, r, a[r], b[r], err1, err2)
		}
	}
}

func setFiles(dir string, m *Manifest) []string {
	var out []string
	for _, f := range m.Files {
		out = append(out, filepath.Join(dir, f.Path))
	}
	return out
}

// TestPropertyRoundTrips: random shapes, dtypes, uneven layouts with
// repeated slices and small memory caps; N -> M -> N gives the source
// files back bit for bit, and N -> 1 -> M equals N -> M.
func TestPropertyRoundTrips(t *testing.T) {
	ctx := context.Background()
	banded, sliced, empties := 0, 0, 0
	defer func() {
		if !t.Failed() && (banded == 0 || sliced == 0 || empties == 0) {
			t.Errorf("%d tensors were processed in several bands, %d sets used sliced Values, %d had empty source boxes; want some of each", banded, sliced, empties)
		}
	}()
	for seed := range uint64(25) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 12))
			n, m := 1+rng.IntN(6), 1+rng.IntN(6)
			model := randomModel(rng, 6)
			slice := int64(0)
			if rng.IntN(2) == 0 {
				slice = int64(8 * (1 + rng.IntN(8))) // exercise sliced Values
			}
			srcLayout := randomLayout(rng, model, n)
			for _, p := range srcLayout {
				if slices.ContainsFunc(p.Boxes, func(b parallel.Box) bool { return volume(b.Shape) == 0 }) {
					empties++
					break
				}
			}
			crc := seed%2 == 0 // half the sets with the crc_num trailer, half plain as MindSpore's default
			src := writeSourceSet(t, t.TempDir(), model, srcLayout, n, ckpt.WriteOptions{CRC: crc, SliceBytes: slice})
			target := Target{Ranks: m, Placements: randomLayout(rng, model, m)}
			capBytes := int64(max(n, m))*4096 + 2048 + rng.Int64N(2048) // 4 KiB write buffers plus a few rows
			opt := Options{MaxMemory: capBytes, Workers: 1 + rng.IntN(4), SliceBytes: slice, VerifyCRC: true, CRC: crc}

			plan, err := Plan(ctx, src, target, opt)
			if err != nil {
				t.Fatal(err)
			}
			for _, tp := range plan.Tensors {
				if tp.Bands > 1 {
					banded++
				}
			}
			if slice > 0 {
				sliced++
			}
			outM := t.TempDir()
			mm, err := Run(ctx, src, target, outM, opt)
			if err != nil {
				t.Fatal(err)
			}
			checkSet(t, outM, mm, model, target)
			for r, f := range mm.Files {
				if f.Bytes != plan.FileBytes[r] {
					t.Fatalf("rank %d file is %d bytes, the plan said %d", r, f.Bytes, plan.FileBytes[r])
				}
			}
			if mm.Stats.PeakMemory != plan.PeakMemory || plan.PeakMemory > capBytes {
				t.Fatalf("peak memory %d, plan %d, cap %d", mm.Stats.PeakMemory, plan.PeakMemory, capBytes)
			}

			// M -> N with the source layout gives the source files back.
			back := t.TempDir()
			mb, err := Run(ctx, mm.Source(outM), Target{Ranks: n, Placements: srcLayout}, back, opt)
			if err != nil {
				t.Fatal(err)
			}
			sameFiles(t, "N -> M -> N", src.Files, setFiles(back, mb))

			// N -> 1 -> M equals N -> M.
			one := t.TempDir()
			m1, err := Merge(ctx, src, one, "merged.ckpt", opt)
			if err != nil {
				t.Fatal(err)
			}
			var wantWhole bytes.Buffer
			if err := ckpt.Encode(&wantWhole, model, ckpt.WriteOptions{CRC: crc, SliceBytes: slice}); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(one, "merged.ckpt")); !bytes.Equal(got, wantWhole.Bytes()) {
				t.Fatal("merged file differs from ckpt.Encode of the whole model")
			}
			via := t.TempDir()
			mv, err := Run(ctx, m1.Source(one), target, via, opt)
			if err != nil {
				t.Fatal(err)
			}
			sameFiles(t, "N -> 1 -> M", setFiles(outM, mm), setFiles(via, mv))
		})
	}
}
