package reshard

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
)

// hashFiles fingerprints files, to prove a failed run left them alone.
func hashFiles(t *testing.T, paths []string) []string {
	t.Helper()
	var out []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%x", sha256.Sum256(data)))
	}
	return out
}

// listDir returns the names in dir, recursively.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, rel)
		}
		return nil
	})
	return names
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	two := Target{Ranks: 2, Placements: map[string]Placement{"weight": {Shape: []int{8, 8}, Boxes: rowBoxes([]int{8, 8}, 2)}}}
	tests := []struct {
		name   string
		damage func(t *testing.T, src *Source)
		opt    Options
		is     error
		wants  []string // substrings of the error
	}{
		{"missing rank file", func(t *testing.T, src *Source) { os.Remove(src.Files[2]) }, Options{}, os.ErrNotExist,
			[]string{"rank 2", "node2"}},
		{"fewer files than boxes", func(t *testing.T, src *Source) { src.Files = src.Files[:3] }, Options{}, ErrPlacement,
			[]string{`tensor "weight"`, "4 boxes for 3 source files"}},
		{"duplicated rank", func(t *testing.T, src *Source) { src.Files[3] = src.Files[1] }, Options{}, ErrSource,
			[]string{"ranks 1 and 3 are the same file"}},
		{"duplicated rank through a hard link", func(t *testing.T, src *Source) {
			link := filepath.Join(t.TempDir(), "again.ckpt")
			if err := os.Link(src.Files[0], link); err != nil {
				t.Skip("no hard links here:", err)
			}
			src.Files[3] = link
		}, Options{}, ErrSource, []string{"ranks 0 and 3 are the same file"}},
		{"shapes that cannot tile", func(t *testing.T, src *Source) {
			p := src.Placements["weight"]
			p.Boxes[1].Shape = []int{3, 8}
			p.Boxes[2].Offset = []int{5, 0}
		}, Options{}, ErrPlacement, []string{`tensor "weight"`}},
		{"slice shape differs from the file", func(t *testing.T, src *Source) {
			src.Placements["weight"] = Placement{Shape: []int{4, 16}, Boxes: []parallel.Box{
				{Offset: []int{0, 0}, Shape: []int{2, 8}}, {Offset: []int{0, 8}, Shape: []int{2, 8}},
				{Offset: []int{2, 0}, Shape: []int{1, 16}}, {Offset: []int{3, 0}, Shape: []int{1, 16}},
			}}
		}, Options{}, ErrPlacement, []string{"node2", `tensor "weight" has shape [2 8]`}},
		{"overlapping boxes", func(t *testing.T, src *Source) {
			src.Placements["weight"].Boxes[2].Offset = []int{1, 0}
		}, Options{}, ErrPlacement, []string{`tensor "weight"`, "overlaps"}},
		{"a hole", func(t *testing.T, src *Source) {
			src.Placements["weight"] = Placement{Shape: []int{10, 8}, Boxes: rowBoxes([]int{8, 8}, 4)}
		}, Options{}, ErrPlacement, []string{`tensor "weight"`, "cover 64 of the 80 elements"}},
		{"tensor missing on one rank", func(t *testing.T, src *Source) {
			tensors, _ := ckpt.Read(src.Files[1])
			if err := ckpt.Write(src.Files[1], tensors[:3], ckpt.WriteOptions{CRC: true}); err != nil {
				t.Fatal(err)
			}
		}, Options{}, ErrSource, []string{"node1", `"moments.weight"`, "missing"}},
		{"truncated file", func(t *testing.T, src *Source) {
			info, _ := os.Stat(src.Files[2])
			os.Truncate(src.Files[2], info.Size()-40)
		}, Options{}, ckpt.ErrFormat, []string{"node2", `tensor "moments.weight"`, "truncated"}},
		{"crc mismatch", func(t *testing.T, src *Source) {
			data, _ := os.ReadFile(src.Files[3])
			data[30] ^= 1 // inside weight's data
			os.WriteFile(src.Files[3], data, 0o644)
		}, Options{VerifyCRC: true}, ckpt.ErrCRC, []string{"node3", "crc32 mismatch"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, _ := seedSet(t)
			tc.damage(t, &src)
			var inputs []string
			for _, f := range src.Files {
				if _, err := os.Stat(f); err == nil {
					inputs = append(inputs, f)
				}
			}
			before := hashFiles(t, inputs)
			if _, err := Plan(ctx, src, two, tc.opt); !errors.Is(err, tc.is) {
				t.Fatalf("Plan: err = %v, want %v", err, tc.is)
			}
			out := t.TempDir()
			os.WriteFile(filepath.Join(out, ManifestName), []byte("{}"), 0o644) // an earlier, complete set
			_, err := Run(ctx, src, two, out, tc.opt)
			if !errors.Is(err, tc.is) {
				t.Fatalf("Run: err = %v, want %v", err, tc.is)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want it to say %q", err, w)
				}
			}
			// Bad input is found before anything is written: an earlier set
			// in the directory stays as it was.
			if left := listDir(t, out); len(left) != 1 || left[0] != ManifestName {
				t.Fatalf("a failed run left %v, want only the earlier manifest", left)
			}
			if after := hashFiles(t, inputs); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Fatal("a failed run changed its inputs")
			}
		})
	}
}

func TestRefusesToOverwriteInputs(t *testing.T) {
	src, _ := seedSet(t)
	dir := filepath.Dir(src.Files[0])
	_, err := Run(context.Background(), src, Target{Ranks: 1, Files: []string{"CKP_1-4_32.ckpt"}}, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "refusing to overwrite an input") {
		t.Fatalf("err = %v, want a refusal", err)
	}
}

// TestFullDisk writes to a 1 MiB tmpfs: the run fails naming the file and
// tensor, and leaves nothing behind (needs root for mount).
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })

	model := []ckpt.Tensor{mustFloat32(t, "small", []int64{4}, []float32{1, 2, 3, 4}), {Name: "fc.weight", Dims: []int64{512, 1024}, DType: ckpt.DTypeFloat32, Data: make([]byte, 2<<20)}}
	src := writeSourceSet(t, t.TempDir(), model, nil, 1, ckpt.WriteOptions{CRC: true})
	before := hashFiles(t, src.Files)
	os.WriteFile(filepath.Join(dir, ManifestName), []byte("{}"), 0o644) // an earlier set: no longer complete once files are replaced
	_, err := Run(context.Background(), src, Target{Ranks: 1}, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "rank_0.ckpt") || !strings.Contains(err.Error(), `tensor "fc.weight"`) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("err = %v, want no space left naming rank_0.ckpt and fc.weight", err)
	}
	if left := listDir(t, dir); len(left) != 0 {
		t.Fatalf("a failed run left %v", left)
	}
	if after := hashFiles(t, src.Files); after[0] != before[0] {
		t.Fatal("the input changed")
	}
}

// TestVerifyCatchesDamage: a changed byte, a changed hash and copies that
// disagree are all reported.
func TestVerifyCatchesDamage(t *testing.T) {
	ctx := context.Background()
	src, _ := seedSet(t)
	run := func(t *testing.T) string {
		out := t.TempDir()
		if _, err := Run(ctx, src, TargetForDevices(src, 2), out, Options{}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Run("flipped byte", func(t *testing.T) {
		out := run(t)
		path := filepath.Join(out, "rank_1.ckpt")
		data, _ := os.ReadFile(path)
		data[40] ^= 1
		os.WriteFile(path, data, 0o644)
		if _, err := Verify(ctx, out, Options{}); !errors.Is(err, ckpt.ErrCRC) || !strings.Contains(err.Error(), "rank_1.ckpt") {
			t.Fatalf("err = %v, want a crc error naming rank_1.ckpt", err)
		}
	})
	t.Run("manifest hash", func(t *testing.T) {
		out := run(t)
		m, _ := ReadManifest(out)
		m.Tensors[3].SHA256 = strings.Repeat("0", 64)
		writeManifest(out, m)
		if _, err := Verify(ctx, out, Options{}); !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), `tensor "moments.weight"`) {
			t.Fatalf("err = %v, want a hash mismatch naming moments.weight", err)
		}
	})
	t.Run("copies disagree", func(t *testing.T) {
		out := run(t)
		path := filepath.Join(out, "rank_1.ckpt")
		tensors, _ := ckpt.Read(path)
		tensors[2] = mustFloat32(t, "momentum", nil, []float32{0.8}) // valid file, other value
		if err := ckpt.Write(path, tensors, ckpt.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		m, _ := ReadManifest(out)
		data, _ := os.ReadFile(path)
		m.Files[1].CRC32 = fmt.Sprintf("%08x", crc32.ChecksumIEEE(data))
		writeManifest(out, m)
		if _, err := Verify(ctx, out, Options{}); !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), `tensor "momentum" differs`) {
			t.Fatalf("err = %v, want the differing copy of momentum", err)
		}
	})
	t.Run("intact", func(t *testing.T) {
		out := run(t)
		m, err := Verify(ctx, out, Options{})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(m.Tensors[0])
		if !strings.Contains(string(data), `"boxes":[{"offset":[0,0],"shape":[4,8]}`) {
			t.Fatalf("manifest tensor = %s, want weight's boxes", data)
		}
	})
}

// TestCancelLeavesNothing: a run cancelled while writing stops with the
// context's error and leaves no files.
func TestCancelLeavesNothing(t *testing.T) {
	model := []ckpt.Tensor{{Name: "big", Dims: []int64{16384, 256}, DType: ckpt.DTypeFloat32, Data: make([]byte, 16<<20)}}
	src := writeSourceSet(t, t.TempDir(), model, nil, 2, ckpt.WriteOptions{CRC: true})
	ctx, cancel := context.WithCancel(context.Background())
	out := t.TempDir()
	// Cancel as soon as the first output file exists.
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if entries, _ := os.ReadDir(out); len(entries) > 0 {
				cancel()
				return
			}
			runtime.Gosched()
		}
	}()
	_, err := Run(ctx, src, Target{Ranks: 2}, out, Options{MaxMemory: 64 << 10})
	close(done)
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if left := listDir(t, out); len(left) != 0 {
		t.Fatalf("a cancelled run left %v", left)
	}
}
