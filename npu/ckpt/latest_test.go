package ckpt

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLatestValidSkipsDamagedFiles runs once with the crc_num trailer and
// once with the default plain file and its sidecar digest: a flipped byte
// must be caught either way, and a file that cannot be proven whole (no
// trailer, no sidecar) is skipped as well.
func TestLatestValidSkipsDamagedFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    WriteOptions
		trailer int
		caught  error
	}{
		{"crc_num trailer", WriteOptions{CRC: true}, crcTrailerLen, ErrCRC},
		{"sidecar digest", WriteOptions{Digest: true}, 0, ErrDigest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name string, v float32, opts WriteOptions) string {
				w, err := NewFloat32("w", []int64{4}, []float32{v, v, v, v})
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, name)
				if err := Write(p, []Tensor{w}, opts); err != nil {
					t.Fatal(err)
				}
				return p
			}
			flip := func(p string) {
				raw, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				raw[len(raw)-tc.trailer-3] ^= 1 // last float's bytes
				if err := os.WriteFile(p, raw, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			old := write("CKP-1_5.ckpt", 1, tc.opts)
			mid := write("CKP-2_5.ckpt", 2, tc.opts)
			newest := write("CKP-3_5.ckpt", 3, tc.opts)
			unproven := write("CKP-4_5.ckpt", 4, WriteOptions{}) // a save killed before its sidecar
			if got, err := Latest(dir, "CKP"); err != nil || got != unproven {
				t.Fatalf("Latest = %q, %v; want %q", got, err, unproven)
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
			if len(skipped) != 3 || skipped[0].Path != unproven || !errors.Is(skipped[0].Err, ErrUnverified) ||
				skipped[1].Path != newest || !errors.Is(skipped[1].Err, tc.caught) || skipped[2].Path != mid {
				t.Errorf("skipped = %+v, want %s (unverified), %s (%v), %s", skipped, unproven, newest, tc.caught, mid)
			}
			flip(old)
			if _, _, skipped, err := LatestValid(dir, "CKP"); !errors.Is(err, ErrNoCheckpoint) || len(skipped) != 4 {
				t.Errorf("all damaged: err %v, %d skipped; want ErrNoCheckpoint and 4", err, len(skipped))
			}
			if _, _, _, err := LatestValid(t.TempDir(), "CKP"); !errors.Is(err, ErrNoCheckpoint) {
				t.Errorf("empty dir: %v, want ErrNoCheckpoint", err)
			}
		})
	}
}

// TestDigestSidecar: Write with Digest leaves the file plain protobuf and a
// sha256sum line beside it; ReadFile checks it; a write without Digest
// removes a stale sidecar; pruning removes sidecars with their files.
func TestDigestSidecar(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "CKP-1_1.ckpt")
	w, _ := NewFloat32("w", []int64{2}, []float32{1, 2})
	if err := Write(p, []Tensor{w}, WriteOptions{Digest: true}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	plain := encode(t, []Tensor{w}, WriteOptions{})
	if string(raw) != string(plain) {
		t.Fatal("Digest changed the checkpoint's bytes")
	}
	side, err := os.ReadFile(DigestPath(p))
	sum := sha256.Sum256(raw)
	if err != nil || string(side) != hex.EncodeToString(sum[:])+"  CKP-1_1.ckpt\n" {
		t.Fatalf("sidecar = %q, %v", side, err)
	}
	if f, err := ReadVerified(p); err != nil || !f.Digest || f.CRC {
		t.Fatalf("ReadVerified: %+v, %v", f, err)
	}
	if err := os.WriteFile(DigestPath(p), []byte("not hex  CKP-1_1.ckpt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p); !errors.Is(err, ErrDigest) {
		t.Fatalf("a sidecar that is no digest: %v, want ErrDigest", err)
	}
	if err := Write(p, []Tensor{w}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(DigestPath(p)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stale sidecar kept: %v", err)
	}
	if _, err := ReadVerified(p); !errors.Is(err, ErrUnverified) {
		t.Fatalf("ReadVerified without trailer or sidecar: %v, want ErrUnverified", err)
	}

	mc, err := NewModelCheckpoint("CKP", filepath.Join(dir, "series"), CheckpointConfig{KeepCheckpointMax: 2, Write: WriteOptions{Digest: true}})
	if err != nil {
		t.Fatal(err)
	}
	params := func() ([]Tensor, error) { return []Tensor{w}, nil }
	for step := 1; step <= 4; step++ {
		if _, err := mc.StepEnd(1, step, 4, params); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(mc.Dir())
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"CKP-1_3.ckpt", "CKP-1_3.ckpt.sha256", "CKP-1_4.ckpt", "CKP-1_4.ckpt.sha256"}
	if !slices.Equal(names, want) {
		t.Fatalf("after pruning: %v, want %v", names, want)
	}
}
