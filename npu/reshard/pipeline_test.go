package reshard

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// TestStagePlacements: a set whose ranks hold different tensors (two
// pipeline stages of two ranks) resharded to another such set, whose
// manifest records the ranks; Verify and Manifest.Source read it back, and
// a merge of it is the whole model.
func TestStagePlacements(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 28))
	model := randomModel(rng, 4)
	// layer weights (and their moments) in stage 0 or 1, the rest on all.
	src := map[string]Placement{}
	dst := map[string]Placement{}
	stage := 0
	for _, x := range model {
		if !strings.HasPrefix(x.Name, "layer") {
			continue
		}
		shape := intShape(x.Dims)
		boxes := randomPlacement(rng, shape, 2, 2, false)
		ranks := []int{2 * stage, 2*stage + 1}
		src[x.Name] = Placement{Shape: shape, Boxes: append(append([]parallel.Box{}, boxes...), boxes...), Ranks: ranks}
		tb := randomPlacement(rng, shape, 1, 1, false)
		dst[x.Name] = Placement{Shape: shape, Boxes: []parallel.Box{{}, tb[0], {}}, Ranks: []int{1 + stage}}
		stage = 1 - stage
	}
	dir := t.TempDir()
	var files []string
	for r := range 4 {
		var tensors []ckpt.Tensor
		for _, x := range model {
			p := placementOf(src, x.Name)
			if !p.holds(r) {
				continue
			}
			box := wholeBox(intShape(x.Dims))
			if p.Boxes != nil {
				box = p.Boxes[r]
			}
			tensors = append(tensors, ckpt.Tensor{Name: x.Name, Dims: fileDims(box.Shape)[:len(box.Shape)], DType: x.DType, Data: extract(x, box)})
		}
		files = append(files, filepath.Join(dir, "rank"+string(rune('0'+r))+".ckpt"))
		if err := ckpt.Write(files[r], tensors, ckpt.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	opt := Options{MaxMemory: 1 << 20, ReplicatedRule: RuleMean}
	m, err := Run(ctx, Source{Files: files, Placements: src}, Target{Ranks: 3, Placements: dst}, out, opt)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 0 holds no layer, ranks 1 and 2 one stage's each.
	for r, f := range m.Files {
		tensors, err := ckpt.Read(filepath.Join(out, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range tensors {
			if p := placementOf(dst, x.Name); !p.holds(r) {
				t.Fatalf("rank %d holds %s, its placement gives it to %v", r, x.Name, p.Ranks)
			}
		}
	}
	if _, err := Verify(ctx, out, opt); err != nil {
		t.Fatal(err)
	}
	one := t.TempDir()
	if _, err := Merge(ctx, m.Source(out), one, "whole.ckpt", opt); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := ckpt.Encode(&want, model, ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(one, "whole.ckpt")); !bytes.Equal(got, want.Bytes()) {
		t.Fatal("merge of the staged set differs from ckpt.Encode of the whole model")
	}
	// A rank file that lost a tensor its stage holds fails Verify.
	tensors, _ := ckpt.Read(filepath.Join(out, m.Files[1].Path))
	if err := ckpt.Write(filepath.Join(out, m.Files[1].Path), tensors[1:], ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(ctx, out, opt); err == nil {
		t.Fatal("Verify accepted a rank file without one of its tensors")
	}
}
