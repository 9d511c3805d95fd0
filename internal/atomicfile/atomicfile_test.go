package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFileReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.json")
	if err := WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("content = %q, %v; want new", got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", st.Mode().Perm())
	}
}

func TestWriteFailureKeepsOldContentAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, 0o644, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "old" {
		t.Fatalf("content = %q after failed write, want old", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir has %d entries after failed write, want 1 (no temp left)", len(entries))
	}
}

// Leftovers finds the temporary file of a write in progress, which is what
// a write killed before its rename leaves, and nothing else.
func TestLeftoversFindsAnUnfinishedWrite(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.ckpt", ".a.ckpt.tmp-x1", ".b.ckpt.tmp-", "a.ckpt.tmp-12"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".c.ckpt.tmp-7"), 0o755); err != nil {
		t.Fatal(err)
	}
	var during []string
	err := Write(filepath.Join(dir, "a.ckpt"), 0o644, func(io.Writer) error {
		var err error
		during, err = Leftovers(dir, func(target string) bool { return target == "a.ckpt" })
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || !strings.HasPrefix(filepath.Base(during[0]), ".a.ckpt.tmp-") {
		t.Fatalf("during the write: %v, want its one temporary file", during)
	}
	if _, err := os.Stat(during[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file is still there after the rename: %v", err)
	}
	other, err := Leftovers(dir, func(string) bool { return true })
	if err != nil || len(other) != 0 {
		t.Fatalf("after the write: %v, %v; want none", other, err)
	}
}
