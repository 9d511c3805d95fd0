package trainer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
)

// CommonCheckpoint picks the newest step every directory has a verified
// checkpoint of: a rank that saved a step more than its peers goes back
// to theirs, a damaged file is skipped (and said so), and with no step in
// common there is none.
func TestCommonCheckpoint(t *testing.T) {
	root := t.TempDir()
	save := func(dir string, steps ...int) string {
		d := filepath.Join(root, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			v, _ := ckpt.NewFloat32("w", []int64{2}, []float32{float32(s), 1})
			// 5 steps an epoch: step 6 is epoch 2's first.
			path := filepath.Join(d, ckpt.FileName("CKP", (s-1)/5+1, (s-1)%5+1))
			if err := ckpt.Write(path, []ckpt.Tensor{v}, ckpt.WriteOptions{Digest: true}); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	a := save("a", 2, 4, 6)
	b := save("b", 2, 4, 6, 8)
	c := save("c", 2, 4, 6)
	// c's step 6 is damaged: a bit flipped after it was written.
	bad := filepath.Join(c, "CKP-2_1.ckpt")
	data, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 1
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	step, files, err := CommonCheckpoint([]string{a, b, c}, "CKP", 5, &log)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(a, "CKP-1_4.ckpt"), filepath.Join(b, "CKP-1_4.ckpt"), filepath.Join(c, "CKP-1_4.ckpt")}
	if step != 4 || strings.Join(files, " ") != strings.Join(want, " ") {
		t.Errorf("step %d, files %v: want step 4, %v", step, files, want)
	}
	if !strings.Contains(log.String(), "skipped "+bad) {
		t.Errorf("the damaged file is not reported: %q", log.String())
	}

	step, files, err = CommonCheckpoint([]string{a, b}, "CKP", 5, nil)
	if err != nil || step != 6 || len(files) != 2 || filepath.Base(files[1]) != "CKP-2_1.ckpt" {
		t.Errorf("a and b: step %d, files %v, err %v: want step 6", step, files, err)
	}
	empty := filepath.Join(root, "empty")
	step, files, err = CommonCheckpoint([]string{a, empty}, "CKP", 5, nil)
	if err != nil || step != 0 || files != nil {
		t.Errorf("with a rank that saved nothing: step %d, files %v, err %v; want none", step, files, err)
	}
}
