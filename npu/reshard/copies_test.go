package reshard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
)

// A replicated tensor whose copies differ is refused naming the tensor,
// the rank and the byte, instead of taking rank 0's copy silently; BatchNorm
// statistics may differ (the rule chooses), and equal copies merge.
func TestReplicatedCopiesThatDifferAreRefused(t *testing.T) {
	dir := t.TempDir()
	var src Source
	for r := range 3 {
		w := []float32{1, 2, 3, 4, 5, 6}
		if r == 2 {
			w[4] = 50
		}
		tensors := []ckpt.Tensor{
			mustFloat32(t, "fc.weight", []int64{3, 2}, w),
			mustFloat32(t, "bn.moving_mean", []int64{2}, []float32{float32(r), 1}),
		}
		path := filepath.Join(dir, "rank"+string(rune('0'+r))+".ckpt")
		if err := ckpt.Write(path, tensors, ckpt.WriteOptions{CRC: true}); err != nil {
			t.Fatal(err)
		}
		src.Files = append(src.Files, path)
	}
	out := t.TempDir()
	_, err := Merge(context.Background(), src, out, "full.ckpt", Options{})
	if !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), src.Files[2]+` (rank 2): tensor "fc.weight" has no layout`) || !strings.Contains(err.Error(), "at byte 18" /* element 4, its third byte */) {
		t.Fatalf("err = %v, want the differing copy of fc.weight named", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Fatalf("a refused merge left %v", entries)
	}
	// The plan reads every copy it compares.
	p, err := Plan(context.Background(), src, Target{Ranks: 1}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tensors[0].ReadBytes != 3*24 || p.Tensors[1].ReadBytes != 8 {
		t.Fatalf("read bytes %d and %d, want 72 (three copies compared) and 8 (rank 0's statistics)", p.Tensors[0].ReadBytes, p.Tensors[1].ReadBytes)
	}
	// Equal copies (rank 2 fixed) merge; the statistics still differ.
	fixed := []ckpt.Tensor{
		mustFloat32(t, "fc.weight", []int64{3, 2}, []float32{1, 2, 3, 4, 5, 6}),
		mustFloat32(t, "bn.moving_mean", []int64{2}, []float32{2, 1}),
	}
	if err := ckpt.Write(src.Files[2], fixed, ckpt.WriteOptions{CRC: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := Merge(context.Background(), src, out, "full.ckpt", Options{}); err != nil {
		t.Fatal(err)
	}
}
