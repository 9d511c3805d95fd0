package ckptset

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
)

func writeRank(t *testing.T, root string, rank int, name string) string {
	t.Helper()
	w, _ := ckpt.NewFloat32("w", []int64{1}, []float32{float32(rank)})
	path := FilePath(root, rank, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ckpt.Write(path, []ckpt.Tensor{w}, ckpt.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFindNewestPerRank(t *testing.T) {
	root := t.TempDir()
	var want []string
	for r := range 3 {
		writeRank(t, root, r, "CKP-1_4.ckpt")
		want = append(want, writeRank(t, root, r, "CKP-2_4.ckpt"))
	}
	writeRank(t, root, 0, "OTHER-9_9.ckpt")
	os.MkdirAll(filepath.Join(root, "device_7"), 0o755) // not the layout's name
	got, err := Find(root, "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Find = %v, want %v", got, want)
	}
	if got, err := Find(root, "OTHER"); err == nil {
		t.Fatalf("prefix OTHER: %v, want an error for rank 1 (it has no OTHER checkpoint)", got)
	} else if !strings.Contains(err.Error(), "rank 1") || !errors.Is(err, ckpt.ErrNoCheckpoint) {
		t.Fatalf("prefix OTHER: %v", err)
	}
}

func TestFindRefusesBrokenSets(t *testing.T) {
	empty := t.TempDir()
	if _, err := Find(empty, ""); !errors.Is(err, ErrNotASet) {
		t.Fatalf("empty dir: %v, want ErrNotASet", err)
	}
	gap := t.TempDir()
	writeRank(t, gap, 0, "CKP-1_1.ckpt")
	writeRank(t, gap, 2, "CKP-1_1.ckpt")
	if _, err := Find(gap, ""); err == nil || !strings.Contains(err.Error(), "rank 1 is missing (device1/ absent, device2/ present)") {
		t.Fatalf("gap: %v", err)
	}
	if _, err := Find(filepath.Join(gap, "nope"), ""); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing root: %v", err)
	}
}

// TestFindStageLeads reads an integrated_save pipeline set (only the
// first rank of each stage saved) and names the rank that breaks it.
func TestFindStageLeads(t *testing.T) {
	root := t.TempDir()
	want := []string{writeRank(t, root, 0, "CKP-1_4.ckpt"), writeRank(t, root, 2, "CKP-1_4.ckpt")}
	for _, r := range []int{1, 3} {
		if err := os.MkdirAll(RankDir(root, r), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FindStageLeads(root, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FindStageLeads = %v, want %v", got, want)
	}
	if _, err := FindStageLeads(root, "", 3); err == nil || !strings.Contains(err.Error(), "4 ranks do not split into 3 pipeline stages") {
		t.Errorf("3 stages of 4 ranks: %v", err)
	}
	writeRank(t, root, 3, "CKP-1_4.ckpt")
	if _, err := FindStageLeads(root, "", 2); err == nil || !strings.Contains(err.Error(), "rank 3 holds") {
		t.Errorf("rank 3 with a checkpoint: %v", err)
	}
	os.RemoveAll(RankDir(root, 3))
	os.RemoveAll(RankDir(root, 2))
	if _, err := FindStageLeads(root, "", 2); err == nil || !strings.Contains(err.Error(), "rank 2, the first of pipeline stage 1") {
		t.Errorf("stage 1's first rank without a checkpoint: %v", err)
	}
}

func TestFileName(t *testing.T) {
	for _, tc := range []struct{ prefix, source, want string }{
		{"", "/x/CKP-3_156.ckpt", "CKP-3_156.ckpt"},
		{"RS", "CKP-Integrated_1-4_32.ckpt", "RS-4_32.ckpt"},
		{"", "merged.ckpt", "CKP-1_1.ckpt"},
	} {
		if got := FileName(tc.prefix, tc.source); got != tc.want {
			t.Errorf("FileName(%q, %q) = %q, want %q", tc.prefix, tc.source, got, tc.want)
		}
	}
}
