package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mspipe/mspipe/internal/userfile"
)

// A run.json that is a FIFO, a directory or a link to a device is refused
// at once: before, LoadState opened a FIFO and waited for a writer forever
// (runs, logs and resume hung), and read /dev/zero without end.
func TestLoadStateRefusesSpecialFiles(t *testing.T) {
	for name, make := range map[string]func(string) error{
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"directory": func(p string) error { return os.Mkdir(p, 0o755) },
		"device":    func(p string) error { return os.Symlink("/dev/zero", p) },
	} {
		dir := filepath.Join(t.TempDir(), "20260101-000000-abcdef")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "run.json")
		if err := make(path); err != nil {
			t.Fatal(err)
		}
		_, err := LoadState(dir)
		if !errors.Is(err, userfile.ErrNotRegular) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: LoadState error %v, want one naming %s as not a regular file", name, err, path)
		}
	}
}

// A run.json larger than any real state is refused by its size.
func TestLoadStateSizeBound(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "20260101-000000-abcdef")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxStateBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := LoadState(dir); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("LoadState of a %d-byte run.json: %v, want a size error", maxStateBytes+1, err)
	}
}
