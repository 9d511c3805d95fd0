package ckptset

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/dirtree"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
)

// splitSet writes a 4-rank set whose [8, 4] weight is split along
// dimension 0, with its strategy.ckpt, and returns its root.
func splitSet(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for r := range 4 {
		vals := make([]float32, 8)
		for i := range vals {
			vals[i] = float32(r*8 + i)
		}
		w, _ := ckpt.NewFloat32("weight", []int64{2, 4}, vals)
		lr, _ := ckpt.NewFloat32("learning_rate", nil, []float32{0.01})
		if _, err := WriteRank(root, r, "CKP-1_4.ckpt", []ckpt.Tensor{w, lr}); err != nil {
			t.Fatal(err)
		}
	}
	sf := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{"weight": {DeviceMatrix: []int{4, 1}, TensorMap: []int{1, 0}}}}
	if err := parallel.WriteStrategyFile(filepath.Join(root, StrategyNames[0]), sf, parallel.FormatProto); err != nil {
		t.Fatal(err)
	}
	return root
}

func reshardTo(t *testing.T, root, out string, devices int, force bool, opt reshard.Options) (*reshard.Manifest, error) {
	t.Helper()
	s, in, err := Load([]string{root}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	target := reshard.TargetForDevices(s.Source, devices)
	target.Files = TargetFiles(target.Ranks, "", in.Files[0])
	return Reshard(context.Background(), s, in, target, s.StrategyForDevices(devices), out, force, opt)
}

// The tools' inputs are read-only: an output that is, holds or lies
// inside one is refused before anything is written. Before, a reshard
// with -o SET deleted SET/strategy.ckpt before refusing, and merge -o
// SET/strategy.ckpt or SET/full.ckpt replaced the set's own files.
func TestOutputsNeverTouchInputs(t *testing.T) {
	root := splitSet(t)
	resharded := filepath.Join(t.TempDir(), "r")
	if _, err := reshardTo(t, root, resharded, 2, false, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	before, beforeR := dirtree.Snapshot(t, root), dirtree.Snapshot(t, resharded)
	for _, out := range []string{root, filepath.Join(root, "device0"), filepath.Join(root, "new"), filepath.Dir(root)} {
		for _, force := range []bool{false, true} {
			_, err := reshardTo(t, root, out, 2, force, reshard.Options{})
			if !errors.Is(err, ErrInputOutput) || !strings.Contains(err.Error(), out) {
				t.Errorf("reshard -o %s (force %v): %v, want a refusal naming it", out, force, err)
			}
		}
	}
	// Through a link: the same directory by another name.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	if _, err := reshardTo(t, root, link, 2, true, reshard.Options{}); !errors.Is(err, ErrInputOutput) {
		t.Errorf("reshard -o a link to the set: %v, want a refusal", err)
	}
	merge := func(src, out string) error {
		s, in, err := Load([]string{src}, "", "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = Merge(context.Background(), s, in, out, true, reshard.Options{})
		return err
	}
	for _, c := range []struct{ src, out string }{
		{root, filepath.Join(root, StrategyNames[0])},
		{root, filepath.Join(root, "full.ckpt")},
		{resharded, filepath.Join(resharded, "full.ckpt")},
		{resharded, filepath.Join(resharded, "device0", "ckpt_0", "CKP-1_4.ckpt")},
	} {
		if err := merge(c.src, c.out); !errors.Is(err, ErrInputOutput) {
			t.Errorf("merge %s -o %s: %v, want a refusal", c.src, c.out, err)
		}
	}
	// Rank files and a strategy file given one by one.
	files, err := Find(root, "")
	if err != nil {
		t.Fatal(err)
	}
	strategy := filepath.Join(root, StrategyNames[0])
	for _, out := range []string{files[1], strategy} {
		s, in, err := Load(files, "", strategy)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Merge(context.Background(), s, in, out, true, reshard.Options{}); !errors.Is(err, ErrInputOutput) {
			t.Errorf("merge FILES -o %s: %v, want a refusal", out, err)
		}
	}
	if after := dirtree.Snapshot(t, root); after != before {
		t.Fatalf("the set changed:\nbefore\n%s\nafter\n%s", before, after)
	}
	if after := dirtree.Snapshot(t, resharded); after != beforeR {
		t.Fatalf("the resharded set changed:\nbefore\n%s\nafter\n%s", beforeR, after)
	}
}

// A non-empty output directory is refused unless force, which replaces it
// whole: a foreign file there does not survive into the new set.
func TestReshardReplacesWholeOrRefuses(t *testing.T) {
	root := splitSet(t)
	out := filepath.Join(t.TempDir(), "out")
	if err := os.MkdirAll(filepath.Join(out, "device3", "ckpt_3"), 0o755); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(out, "device0", "ckpt_0", "CKP-9_9.ckpt")
	os.MkdirAll(filepath.Dir(foreign), 0o755)
	if err := os.WriteFile(foreign, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := dirtree.Snapshot(t, out)
	_, err := reshardTo(t, root, out, 2, false, reshard.Options{})
	if !errors.Is(err, atomicfile.ErrNotEmpty) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("non-empty output: %v, want a refusal pointing at --force", err)
	}
	if after := dirtree.Snapshot(t, out); after != before {
		t.Fatalf("a refused reshard changed the output:\n%s", after)
	}
	if _, err := reshardTo(t, root, out, 2, true, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(foreign); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the foreign file survived --force: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "device3")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the foreign rank directory survived --force: %v", err)
	}
	if _, err := reshard.Verify(context.Background(), out, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(filepath.Join(out, "device1", "ckpt_1", "CKP-1_4.ckpt")); err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("rank file: %v, %v; want mode 0644 as training writes", info, err)
	}
	assertNoLeftovers(t, filepath.Dir(out), "out")
}

func assertNoLeftovers(t *testing.T, dir, base string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "."+base+".") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A run that fails after it has started writing (here: cancelled at its
// first progress report) leaves the earlier set whole and nothing beside it.
func TestFailedReshardKeepsTheOldSet(t *testing.T) {
	root := splitSet(t)
	out := filepath.Join(t.TempDir(), "out")
	if _, err := reshardTo(t, root, out, 4, false, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	before := dirtree.Snapshot(t, out)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	written := int64(0)
	s, in, err := Load([]string{root}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	target := reshard.TargetForDevices(s.Source, 2)
	target.Files = TargetFiles(2, "", in.Files[0])
	opt := reshard.Options{Progress: func(w, _ int64) { written = w; cancel() }}
	if _, err := Reshard(ctx, s, in, target, s.StrategyForDevices(2), out, true, opt); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the cancellation", err)
	}
	if written == 0 {
		t.Fatal("the run failed before writing: the test does not reach a failure mid-write")
	}
	if after := dirtree.Snapshot(t, out); after != before {
		t.Fatalf("a failed reshard changed the earlier set:\nbefore\n%s\nafter\n%s", before, after)
	}
	if _, err := reshard.Verify(context.Background(), out, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, filepath.Dir(out), "out")
}

// One writer per output: while the lock is held, a reshard into the same
// directory is refused at once; what a killed writer left (named
// .{base}.tmp-{digits}) is removed by the next run, other names are not.
func TestReshardLockAndLeftovers(t *testing.T) {
	root := splitSet(t)
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	unlock, err := atomicfile.Lock(out)
	if err != nil {
		t.Fatal(err)
	}
	_, err = reshardTo(t, root, out, 2, false, reshard.Options{})
	unlock()
	if !errors.Is(err, atomicfile.ErrLocked) || !strings.Contains(err.Error(), out) {
		t.Fatalf("second writer: %v, want a refusal naming the output", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused writer created the output: %v", err)
	}
	killedDir := filepath.Join(parent, ".out.tmp-123456")
	os.MkdirAll(filepath.Join(killedDir, "device0", "ckpt_0"), 0o755)
	os.WriteFile(filepath.Join(killedDir, "device0", "ckpt_0", ".CKP-1_4.ckpt.tmp-99"), make([]byte, 1000), 0o600)
	killedFile := filepath.Join(parent, ".out.tmp-777")
	os.WriteFile(killedFile, []byte("x"), 0o600)
	other := filepath.Join(parent, ".out.tmp-notdigits")
	os.WriteFile(other, []byte("x"), 0o600)
	if _, err := reshardTo(t, root, out, 2, false, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{killedDir, killedFile} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("leftover %s not removed: %v", p, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("%s is not a leftover's name but was removed: %v", other, err)
	}
	if _, err := os.Stat(atomicfile.LockName(out)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lock file left: %v", err)
	}
}

// verify and init: read only what the manifest lists: a stale checkpoint
// beside a rank's file, or a strategy file that is not the one written,
// is refused by name.
func TestStaleFilesDoNotPassAsPartOfTheSet(t *testing.T) {
	root := splitSet(t)
	out := filepath.Join(t.TempDir(), "out")
	if _, err := reshardTo(t, root, out, 2, false, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(out, "device0", "ckpt_0", "CKP-1_4.ckpt")
	if got, err := RankFile(out, 0, ""); err != nil || got != want {
		t.Fatalf("RankFile = %q, %v; want %q", got, err, want)
	}
	stale := filepath.Join(out, "device0", "ckpt_0", "CKP-9_9.ckpt")
	data, _ := os.ReadFile(want)
	if err := os.WriteFile(stale, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.Verify(context.Background(), out, reshard.Options{}); !errors.Is(err, reshard.ErrVerify) || !strings.Contains(err.Error(), stale) {
		t.Errorf("verify with a stale file: %v, want a refusal naming it", err)
	}
	if got, err := RankFile(out, 0, ""); err == nil || !strings.Contains(err.Error(), stale) {
		t.Errorf("init with a stale file: %q, %v; want a refusal naming it", got, err)
	}
	os.Remove(stale)
	if _, err := RankFile(out, 2, ""); err == nil || !strings.Contains(err.Error(), "2 ranks") {
		t.Errorf("init rank 2 of a 2-rank set: %v", err)
	}
	// The strategy file is checked: changed, or gone.
	strategy := filepath.Join(out, StrategyNames[0])
	orig, _ := os.ReadFile(strategy)
	other := &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{"weight": {DeviceMatrix: []int{2, 1}, TensorMap: []int{-1, -1}}}}
	if err := parallel.WriteStrategyFile(strategy, other, parallel.FormatProto); err != nil {
		t.Fatal(err)
	}
	if _, err := reshard.Verify(context.Background(), out, reshard.Options{}); !errors.Is(err, reshard.ErrVerify) || !strings.Contains(err.Error(), strategy) {
		t.Errorf("verify with another strategy file: %v, want a refusal naming it", err)
	}
	os.Remove(strategy)
	if _, err := reshard.Verify(context.Background(), out, reshard.Options{}); !errors.Is(err, reshard.ErrVerify) || !strings.Contains(err.Error(), "strategy") {
		t.Errorf("verify without the strategy file: %v, want a refusal", err)
	}
	os.WriteFile(strategy, orig, 0o644)
	if _, err := reshard.Verify(context.Background(), out, reshard.Options{}); err != nil {
		t.Fatalf("verify with the strategy file restored: %v", err)
	}
	// A strategy.json the manifest does not list.
	os.WriteFile(filepath.Join(out, "strategy.json"), []byte("{}"), 0o644)
	if _, err := reshard.Verify(context.Background(), out, reshard.Options{}); !errors.Is(err, reshard.ErrVerify) || !strings.Contains(err.Error(), "strategy.json") {
		t.Errorf("verify with an unlisted strategy.json: %v", err)
	}
}

// merge refuses an existing output or manifest unless force, and writes
// its checkpoint readable by all as training does.
func TestMergeRefusesExistingOutputs(t *testing.T) {
	root := splitSet(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "full.ckpt")
	merge := func(out string, force bool) error {
		s, in, err := Load([]string{root}, "", "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = Merge(context.Background(), s, in, out, force, reshard.Options{})
		return err
	}
	if err := merge(out, false); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(out); err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("merged file: %v, %v; want mode 0644", info, err)
	}
	before := dirtree.Snapshot(t, dir)
	for _, o := range []string{out, filepath.Join(dir, "other.ckpt")} {
		if err := merge(o, false); !errors.Is(err, atomicfile.ErrNotEmpty) || !strings.Contains(err.Error(), "--force") {
			t.Errorf("merge -o %s beside an earlier merge: %v, want a refusal", o, err)
		}
	}
	if after := dirtree.Snapshot(t, dir); after != before {
		t.Fatalf("a refused merge changed its directory:\n%s", after)
	}
	// What a killed merge left beside its outputs goes with the next one.
	killed := []string{filepath.Join(dir, ".full.ckpt.tmp-4242"), filepath.Join(dir, ".manifest.json.tmp-17")}
	for _, p := range killed {
		os.WriteFile(p, make([]byte, 100), 0o600)
	}
	if err := merge(out, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range killed {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("leftover %s not removed: %v", p, err)
		}
	}
}

// A reshard into a directory holding a good set, on a disk too small for
// the new one, is refused before the first byte and leaves the old set
// whole (before, it started writing and left neither). Needs root to mount
// a 1 MiB tmpfs.
func TestReshardOnAFullDiskKeepsTheOldSet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	disk := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", disk).Run() })
	out := filepath.Join(disk, "out")
	if _, err := reshardTo(t, splitSet(t), out, 2, false, reshard.Options{}); err != nil {
		t.Fatal(err)
	}
	before := dirtree.Snapshot(t, out)
	big := t.TempDir()
	for r := range 2 {
		w := ckpt.Tensor{Name: "weight", DType: ckpt.DTypeFloat32, Dims: []int64{256, 1024}, Data: make([]byte, 1<<20)}
		if _, err := WriteRank(big, r, "CKP-1_4.ckpt", []ckpt.Tensor{w}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := reshardTo(t, big, out, 1, true, reshard.Options{})
	if !errors.Is(err, atomicfile.ErrNoSpace) {
		t.Fatalf("err = %v, want the free space refused", err)
	}
	if after := dirtree.Snapshot(t, out); after != before {
		t.Fatalf("the old set changed:\n%s", after)
	}
	assertNoLeftovers(t, disk, "out")
}
