package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/dirtree"

	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/ckptset"
	"github.com/mspipe/mspipe/npu/parallel"
)

// The checkpoint tools never write over, into or around their inputs, and
// refuse before writing anything. Before: `reshard SET --devices 2 -o SET`
// deleted SET/strategy.ckpt, then refused; `merge SET -o SET/strategy.ckpt`
// and `-o SET/full.ckpt` replaced the set's own files.
func TestCkptToolsLeaveTheirInputsAlone(t *testing.T) {
	root := t.TempDir()
	files := writeSeedsSet(t, root)
	strategy := seedsStrategy(t, root)
	resharded := filepath.Join(t.TempDir(), "resharded")
	if code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "-o", resharded); code != ExitOK {
		t.Fatalf("reshard: %s", stderr)
	}
	before, beforeR := dirtree.Snapshot(t, root), dirtree.Snapshot(t, resharded)
	for _, args := range [][]string{
		{"reshard", root, "--devices", "2", "-o", root},
		{"reshard", root, "--devices", "2", "-o", root, "--force"},
		{"reshard", root, "--devices", "2", "-o", filepath.Join(root, "device0")},
		{"reshard", root, "--devices", "2", "-o", filepath.Dir(root), "--force"},
		{"reshard", resharded, "--devices", "1", "-o", resharded, "--force"},
		{"merge", root, "-o", strategy},
		{"merge", root, "-o", filepath.Join(root, "full.ckpt")},
		{"merge", resharded, "-o", filepath.Join(resharded, "full.ckpt"), "--force"},
		{"merge", files[0], files[1], files[2], files[3], "--strategy", strategy, "-o", files[2], "--force"},
		{"merge", files[0], files[1], files[2], files[3], "--strategy", strategy, "-o", strategy, "--force"},
	} {
		code, _, stderr := runCkpt(t, args...)
		if code != ExitUsage || !strings.Contains(stderr, "input") {
			t.Errorf("ckpt %s: exit %d, %q; want exit 2 and a refusal to write over an input", strings.Join(args, " "), code, stderr)
		}
	}
	if after := dirtree.Snapshot(t, root); after != before {
		t.Fatalf("the set changed:\nbefore\n%s\nafter\n%s", before, after)
	}
	if after := dirtree.Snapshot(t, resharded); after != beforeR {
		t.Fatalf("the resharded set changed:\nbefore\n%s\nafter\n%s", beforeR, after)
	}
}

// A reshard into a non-empty directory is refused unless --force, which
// replaces it whole; stale files there never pass as part of the new set.
// Before, foreign device{i}/ files stayed beside the new set and verify
// said verified.
func TestCkptReshardIntoNonEmptyDirectory(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root)
	seedsStrategy(t, root)
	out := t.TempDir()
	stale := filepath.Join(out, "device0", "ckpt_0", "CKP-9_9.ckpt")
	os.MkdirAll(filepath.Dir(stale), 0o755)
	os.WriteFile(stale, []byte("stale"), 0o644)
	code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "-o", out)
	if code != ExitUsage || !strings.Contains(stderr, "--force") {
		t.Fatalf("non-empty -o: exit %d, %q; want a refusal pointing at --force", code, stderr)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("a refused reshard touched the directory: %v", err)
	}
	if code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "-o", out, "--force"); code != ExitOK {
		t.Fatalf("--force: %s", stderr)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Fatal("the stale file survived --force")
	}
	if code, _, stderr := runCkpt(t, "verify", out); code != ExitOK {
		t.Fatalf("verify: %s", stderr)
	}
	// A stale file copied in afterwards is refused by verify, by name.
	data, _ := os.ReadFile(filepath.Join(out, "device0", "ckpt_0", "CKP-1_4.ckpt"))
	os.WriteFile(stale, data, 0o644)
	if code, _, stderr := runCkpt(t, "verify", out); code != ExitFailed || !strings.Contains(stderr, stale) || !strings.Contains(stderr, "not listed") {
		t.Fatalf("verify with a stale file: exit %d, %q", code, stderr)
	}
	os.Remove(stale)
	// verify checks the strategy file: one edited after the reshard is
	// refused.
	strategy := filepath.Join(out, "strategy.ckpt")
	seedsStrategy(t, out) // the source's 4-device layout over the 2-rank set's
	if code, _, stderr := runCkpt(t, "verify", out); code != ExitFailed || !strings.Contains(stderr, strategy) {
		t.Fatalf("verify with a replaced strategy file: exit %d, %q", code, stderr)
	}
}

// Writes to a user-named path refuse FIFOs (and devices, sockets,
// directories) instead of replacing them with a regular file.
func TestCkptOutputsRefuseSpecialFiles(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root)
	seedsStrategy(t, root)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "out.ckpt")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	stFifo := filepath.Join(dir, "out.safetensors")
	if err := syscall.Mkfifo(stFifo, 0o600); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "full.ckpt")
	if code, _, stderr := runCkpt(t, "merge", root, "-o", src); code != ExitOK {
		t.Fatal(stderr)
	}
	for _, args := range [][]string{
		{"ckpt", "merge", root, "-o", fifo, "--force"},
		{"ckpt", "convert", src, fifo},
		{"ckpt", "convert", src, stFifo},
		{"ranktable", "generate", "--devices", "2", "-o", fifo},
		{"ckpt", "reshard", root, "--devices", "2", "-o", fifo, "--force"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code == ExitOK || !strings.Contains(out+errOut, fifo[:len(fifo)-len(filepath.Ext(fifo))]) || !strings.Contains(out+errOut, "FIFO") {
			t.Errorf("mspipe %s: exit %d, %q; want a refusal naming the FIFO", strings.Join(args, " "), code, out+errOut)
		}
	}
	for _, p := range []string{fifo, stFifo} {
		if info, err := os.Lstat(p); err != nil || info.Mode()&fs.ModeNamedPipe == 0 {
			t.Fatalf("%s was replaced: %v, %v", p, info, err)
		}
	}
}

// Merge and reshard outputs are readable by all, as training's checkpoints
// are (they were 0600).
func TestCkptOutputModes(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root)
	seedsStrategy(t, root)
	merged := filepath.Join(t.TempDir(), "full.ckpt")
	out := filepath.Join(t.TempDir(), "set")
	if code, _, stderr := runCkpt(t, "merge", root, "-o", merged); code != ExitOK {
		t.Fatal(stderr)
	}
	if code, _, stderr := runCkpt(t, "reshard", root, "--devices", "2", "-o", out); code != ExitOK {
		t.Fatal(stderr)
	}
	for _, p := range []string{merged, filepath.Join(out, "device1", "ckpt_1", "CKP-1_4.ckpt"), filepath.Join(out, "strategy.ckpt")} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v, %v; want mode 0644", p, info, err)
		}
	}
}

// --devices is capped with a reason, at once: `--plan --devices 100000`
// took 16 s and 1 GB.
func TestCkptReshardDevicesCap(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root)
	seedsStrategy(t, root)
	for _, n := range []string{"100000", "4097"} {
		code, _, stderr := runCkpt(t, "reshard", root, "--devices", n, "--plan")
		if code != ExitUsage || !strings.Contains(stderr, "want 1 to 4096") {
			t.Errorf("--devices %s: exit %d, %q", n, code, stderr)
		}
	}
	if code, _, stderr := runCkpt(t, "reshard", root, "--devices", "4096", "--indivisible", "replicate", "--plan", "--format", "json"); code != ExitOK {
		t.Errorf("--devices 4096: exit %d, %q", code, stderr)
	}
}

// Tensor names reach the terminal escaped: a name holding an escape
// sequence or a tab is printed quoted by inspect (file and set) and by a
// plan; printable names are unchanged.
func TestCkptTensorNamesAreEscaped(t *testing.T) {
	dir := t.TempDir()
	evil := "w\x1b[2J\x1b]0;owned\x07\tx"
	w, _ := ckpt.NewFloat32(evil, []int64{1}, []float32{1})
	plain, _ := ckpt.NewFloat32("layer.weight", []int64{1}, []float32{2})
	file := filepath.Join(dir, "evil.ckpt")
	if err := ckpt.Write(file, []ckpt.Tensor{w, plain}, ckpt.WriteOptions{CRC: true}); err != nil {
		t.Fatal(err)
	}
	set := filepath.Join(dir, "set")
	for r := range 2 {
		if _, err := ckptset.WriteRank(set, r, "CKP-1_1.ckpt", []ckpt.Tensor{w, plain}); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"inspect", file}, {"inspect", set}, {"merge", set, "--plan"}} {
		code, stdout, stderr := runCkpt(t, args...)
		if code != ExitOK {
			t.Fatalf("ckpt %v: exit %d: %s", args, code, stderr)
		}
		if strings.ContainsAny(stdout, "\x1b\x07") {
			t.Errorf("ckpt %v: raw control characters on stdout: %q", args, stdout)
		}
		if !strings.Contains(stdout, `"w\x1b[2J\x1b]0;owned\a\tx"`) || !strings.Contains(stdout, "\nlayer.weight ") {
			t.Errorf("ckpt %v: stdout lacks the quoted name or the plain one:\n%s", args, stdout)
		}
	}
}

// merge refuses what it used to accept silently: a set without its
// strategy file whose "replicated" copies differ (it took rank 0's), and a
// strategy file with a layout for a tensor the set does not hold.
func TestCkptMergeRefusesMismatchedSets(t *testing.T) {
	root := t.TempDir()
	writeSeedsSet(t, root) // weight differs per rank: it is split
	out := filepath.Join(t.TempDir(), "full.ckpt")
	code, _, stderr := runCkpt(t, "merge", root, "-o", out)
	if code != ExitFailed || !strings.Contains(stderr, `(rank 1): tensor "weight" has no layout`) {
		t.Fatalf("merge without the strategy file: exit %d, %q; want the differing copy named", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a refused merge wrote its output")
	}
	strategy := filepath.Join(t.TempDir(), "other.ckpt")
	writeStrategy(t, strategy, &parallel.StrategyFile{Layouts: map[string]parallel.TensorLayout{
		"weight":       {DeviceMatrix: []int{4, 1}, TensorMap: []int{1, 0}},
		"decoder.bias": {DeviceMatrix: []int{4, 1}, TensorMap: []int{1}},
	}})
	code, _, stderr = runCkpt(t, "merge", root, "--strategy", strategy, "-o", out)
	if code != ExitFailed || !strings.Contains(stderr, `strategy layout of "decoder.bias": no such tensor`) {
		t.Fatalf("merge with a layout for a missing tensor: exit %d, %q", code, stderr)
	}
}
