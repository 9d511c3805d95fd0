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

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.0 GiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
