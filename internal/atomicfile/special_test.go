package atomicfile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// specialNodes makes a FIFO, a socket, a directory and (as root) a
// character device like /dev/null in a test directory, by kind.
func specialNodes(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	nodes := map[string]string{}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	nodes["a FIFO"] = fifo
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	nodes["a socket"] = sock
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	nodes["a directory"] = sub
	if os.Geteuid() == 0 {
		null := filepath.Join(dir, "null")
		// 1, 3 is /dev/null's device number; this node lives in the test's
		// directory only.
		if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
			nodes["a character device"] = null
		}
	}
	return nodes
}

// A write whose target is a device, FIFO, socket or directory is refused
// naming the path and what it is, and the node is still there: before,
// the rename replaced it (as root, report -o /dev/full replaced the
// system's /dev/full with a regular file).
func TestWriteRefusesNonRegularTargets(t *testing.T) {
	for kind, path := range specialNodes(t) {
		before, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		err = WriteFile(path, []byte("data"), 0o644)
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), kind) {
			t.Errorf("%s: err = %v, want a refusal naming %s and %q", kind, err, path, kind)
		}
		after, err := os.Lstat(path)
		if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
			t.Errorf("%s: the node was replaced: %v, %v", kind, after, err)
		}
		entries, _ := os.ReadDir(filepath.Dir(path))
		for _, e := range entries {
			if strings.Contains(e.Name(), tempInfix) {
				t.Errorf("%s: temporary file left: %s", kind, e.Name())
			}
		}
	}
	// A link to a FIFO is refused too: writing "to" it would replace the link.
	nodes := specialNodes(t)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(nodes["a FIFO"], link)
	if err := WriteFile(link, nil, 0o644); !errors.Is(err, ErrNotRegular) {
		t.Errorf("link to a FIFO: %v", err)
	}
	// Regular files and new names are written.
	reg := filepath.Join(t.TempDir(), "new")
	if err := WriteFile(reg, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(reg, []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The fallback of the exchange (two renames through a leftover-named
// directory) swaps the directories' contents.
func TestExchangeByRenames(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.Mkdir(a, 0o755)
	os.Mkdir(b, 0o755)
	os.WriteFile(filepath.Join(a, "new"), nil, 0o644)
	os.WriteFile(filepath.Join(b, "old"), nil, 0o644)
	if err := exchangeByRenames(a, b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b, "new")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a, "old")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("entries %v, want a and b only", entries)
	}
}

// ReplaceDir refuses a target that is not a directory, and a non-empty one
// without force; with force the old content is gone.
func TestReplaceDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	fill := func(tmp string) error { return os.WriteFile(filepath.Join(tmp, "set"), []byte("new"), 0o644) }
	if err := ReplaceDir(file, true, fill); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("file target: %v", err)
	}
	target := filepath.Join(dir, "out")
	os.Mkdir(target, 0o755)
	os.WriteFile(filepath.Join(target, "foreign"), nil, 0o644)
	if err := ReplaceDir(target, false, fill); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("non-empty target: %v", err)
	}
	if err := ReplaceDir(target, true, fill); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(target)
	if len(entries) != 1 || entries[0].Name() != "set" {
		t.Fatalf("after force: %v, want only the new set", entries)
	}
	if info, _ := os.Stat(target); info.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, want 0755", info.Mode().Perm())
	}
	all, _ := os.ReadDir(dir)
	if len(all) != 2 {
		t.Fatalf("left beside the target: %v", all)
	}
}
