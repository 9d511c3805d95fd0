package ckpt

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLatestValidSkipsDamagedFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v float32) string {
		w, err := NewFloat32("w", []int64{4}, []float32{v, v, v, v})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := Write(p, []Tensor{w}, WriteOptions{CRC: true}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flip := func(p string) {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		raw[len(raw)-crcTrailerLen-3] ^= 1 // last float's bytes
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := write("CKP-1_5.ckpt", 1)
	mid := write("CKP-2_5.ckpt", 2)
	newest := write("CKP-3_5.ckpt", 3)
	if got, err := Latest(dir, "CKP"); err != nil || got != newest {
		t.Fatalf("Latest = %q, %v; want %q", got, err, newest)
	}
	flip(newest)
	if err := os.WriteFile(mid, []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	path, tensors, skipped, err := LatestValid(dir, "CKP")
	if err != nil || path != old {
		t.Fatalf("LatestValid = %q, %v; want %q", path, err, old)
	}
	if v, err := tensors[0].Float32s(); err != nil || v[3] != 1 {
		t.Errorf("tensors of %s: %v, %v", path, v, err)
	}
	if len(skipped) != 2 || skipped[0].Path != newest || !errors.Is(skipped[0].Err, ErrCRC) || skipped[1].Path != mid {
		t.Errorf("skipped = %+v, want %s (CRC) then %s", skipped, newest, mid)
	}
	flip(old)
	if _, _, skipped, err := LatestValid(dir, "CKP"); !errors.Is(err, ErrNoCheckpoint) || len(skipped) != 3 {
		t.Errorf("all damaged: err %v, %d skipped; want ErrNoCheckpoint and 3", err, len(skipped))
	}
	if _, _, _, err := LatestValid(t.TempDir(), "CKP"); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("empty dir: %v, want ErrNoCheckpoint", err)
	}
}
