package job

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/reshard"
)

// init: of a resharded set starts each rank from the file its manifest
// lists, and refuses the set when a file it does not list sits beside one:
// a stale CKP-9_9.ckpt used to be loaded for rank 0 without a word.
func TestInitRefusesStaleFilesInAReshardedSet(t *testing.T) {
	src := t.TempDir()
	for r := range 2 {
		w, _ := ckpt.NewFloat32("w", []int64{2}, []float32{1, 2})
		if _, err := ckptset.WriteRank(src, r, "CKP-1_4.ckpt", []ckpt.Tensor{w}); err != nil {
			t.Fatal(err)
		}
	}
	s, in, err := ckptset.Load([]string{src}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	set := filepath.Join(t.TempDir(), "set")
	target := reshard.TargetForDevices(s.Source, 2)
	target.Files = ckptset.TargetFiles(2, "", in.Files[0])
	if _, err := ckptset.Reshard(context.Background(), s, in, target, s.StrategyForDevices(2), set, false, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	tc, err := TrainerConfig(Config{Model: "cnn", InitDir: set}, 1, 2, nil)
	if want := ckptset.FilePath(set, 1, "CKP-1_4.ckpt"); err != nil || tc.Init != want {
		t.Fatalf("init = %q, %v; want %q", tc.Init, err, want)
	}
	stale := ckptset.FilePath(set, 0, "CKP-9_9.ckpt")
	data, _ := os.ReadFile(ckptset.FilePath(set, 0, "CKP-1_4.ckpt"))
	if err := os.WriteFile(stale, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := TrainerConfig(Config{Model: "cnn", InitDir: set}, 0, 2, nil); err == nil || !strings.Contains(err.Error(), "init: rank 0") || !strings.Contains(err.Error(), stale) {
		t.Fatalf("a stale file beside the set: %v, want init refused naming it", err)
	}
}
