package userfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFileRegular(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.txt")
	want := strings.Repeat("mspipe ", 400000) // 2.8 MB: several chunks
	if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(context.Background(), path, int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("read %d bytes, want %d", len(got), len(want))
	}
}

func TestReadFileTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, make([]byte, 2048), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(context.Background(), path, 1024)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if msg := err.Error(); msg != "file too large: 2.0 KiB, the limit is 1.0 KiB" {
		t.Fatalf("message %q should give the size and the limit", msg)
	}
}

// A FIFO with no writer would block a plain open forever; a device such as
// /dev/zero would be read without end. Both are refused at once.
func TestSpecialFilesRefusedWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	cases := map[string]string{fifo: "a FIFO", "/dev/zero": "a character device", dir: "a directory"}
	for path, kind := range cases {
		done := make(chan error, 1)
		go func() {
			_, err := ReadFile(context.Background(), path, 0)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) || err.Error() != "is "+kind+", not a regular file" {
				t.Errorf("%s: err = %v, want ErrNotRegular naming %s", path, err, kind)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: ReadFile blocked", path)
		}
	}
}

func TestCopyStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var sink strings.Builder
	n, err := Copy(ctx, &sink, strings.NewReader("data"))
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("Copy after cancel = %d, %v; want 0, context.Canceled", n, err)
	}
}

func TestWithin(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "stages", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "stages", "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(root, "stages", "inner")); err != nil {
		t.Fatal(err)
	}
	good := map[string]string{
		"stages/a/stage.log":     filepath.Join(root, "stages/a/stage.log"),
		"stages/inner/stage.log": filepath.Join(root, "stages/inner/stage.log"),
		"stages/../run.json":     filepath.Join(root, "run.json"),
	}
	for rel, want := range good {
		got, err := Within(root, rel)
		if err != nil || got != want {
			t.Errorf("Within(%q) = %q, %v; want %q", rel, got, err, want)
		}
	}
	for _, rel := range []string{"/etc/passwd", "../x", "stages/../../x", "stages/escape/secret", ".."} {
		if got, err := Within(root, rel); !errors.Is(err, ErrOutside) {
			t.Errorf("Within(%q) = %q, %v; want ErrOutside", rel, got, err)
		}
	}
}

// Within and WritableWithin refuse every way out of the root: "..", an
// absolute path, a link in a parent, a link at the path itself (dangling
// too: creating its file would write where it points), and, for a
// directory about to be written into, a link anywhere under it.
func TestWithinRefusesEveryWayOut(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	mk := func(dir string) {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	mk("ok/sub")
	mk("out")
	link(outside, "parent")                                       // a symlinked parent
	link(filepath.Join(outside, "missing.ckpt"), "dangling.ckpt") // dangling, to outside
	link("chain2", "chain1")                                      // dangling chain leading out
	link(filepath.Join(outside, "x"), "chain2")
	link(filepath.Join(root, "ok", "sub"), "inner") // a link that stays inside
	link(outside, "out/device0")                    // a link inside an output directory
	link("../../ok", "ok/sub/up")                   // relative, still inside

	cases := map[string]bool{ // rel -> allowed by WritableWithin
		"ok":                 true,
		"ok/new/file":        true,
		"inner/file":         true,
		"new":                true,
		"../x":               false,
		"ok/../../x":         false,
		outside + "/x":       false,
		"parent/x":           false,
		"parent":             false,
		"dangling.ckpt":      false,
		"chain1":             false,
		"out":                false,
		"out/device0/ckpt_0": false,
	}
	for rel, ok := range cases {
		_, err := WritableWithin(root, rel)
		if ok && err != nil {
			t.Errorf("WritableWithin(%q) = %v, want allowed", rel, err)
		}
		if !ok && !errors.Is(err, ErrOutside) {
			t.Errorf("WritableWithin(%q) = %v, want ErrOutside", rel, err)
		}
	}
	// Within checks the path, not what lies under a directory.
	if _, err := Within(root, "out"); err != nil {
		t.Errorf("Within(out) = %v: the directory itself is inside", err)
	}
	if _, err := Within(root, "dangling.ckpt"); !errors.Is(err, ErrOutside) {
		t.Errorf("Within(dangling.ckpt) = %v, want ErrOutside", err)
	}
	_, err := WritableWithin(root, "out")
	if want := "device0 is a symbolic link to " + outside + ", outside the directory " + root; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("WritableWithin(out) = %v, want it to say %q", err, want)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 0 {
		t.Errorf("checking created %v outside", entries)
	}
}
