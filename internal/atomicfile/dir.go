package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/internal/userfile"
)

// ErrNotEmpty is wrapped when ReplaceDir's target holds files and the
// caller did not ask to replace it whole.
var ErrNotEmpty = errors.New("not empty")

// ErrLocked is wrapped when another process holds a target's lock.
var ErrLocked = errors.New("another process is writing it")

// ErrNoSpace is wrapped when the file system has less room than a write
// needs.
var ErrNoSpace = errors.New("not enough free space")

// LockName is the name of target's lock file, beside it: .{base}.lock.
func LockName(target string) string {
	return filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".lock")
}

// RemoveLeftovers removes what killed writes of target left beside it: the
// temporary files and directories named .{base}.tmp-{digits}. The caller
// holds target's lock (Lock), so no live writer owns them.
func RemoveLeftovers(target string) error {
	dir, base := filepath.Dir(target), filepath.Base(target)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list leftovers of %s: %w", target, err)
	}
	prefix := "." + base + tempInfix
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !allDigits(rest) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove leftover of %s: %w", target, err)
		}
	}
	return nil
}

// ReplaceDir builds a new directory at target: fill writes it into a fresh
// temporary directory beside target (.{base}.tmp-{digits}), which then
// replaces target in one rename, so target holds either its old content or
// the complete new one. On error target is untouched and the temporary
// directory removed. A target that exists must be a directory; one that
// holds anything is refused unless force says to replace it whole (never
// merged: the old files go). The caller holds target's lock (Lock).
func ReplaceDir(target string, force bool, fill func(tmp string) error) (err error) {
	info, err := os.Lstat(target)
	exists := err == nil
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("output %s: %w", target, err)
	case !info.IsDir():
		return fmt.Errorf("output %s is %s, not a directory: %w", target, userfile.Kind(info.Mode()), ErrNotRegular)
	case !force:
		entries, err := os.ReadDir(target)
		if err != nil {
			return fmt.Errorf("output %s: %w", target, err)
		}
		if len(entries) > 0 {
			return fmt.Errorf("output directory %s holds %d entries (%s ...): give an empty or new directory, or --force to replace it whole: %w", target, len(entries), entries[0].Name(), ErrNotEmpty)
		}
	}
	parent := filepath.Dir(target)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("output %s: %w", target, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(target)+tempInfix+"*")
	if err != nil {
		return fmt.Errorf("output %s: %w", target, err)
	}
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("output %s: %w", target, err)
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if err := syncTree(tmp); err != nil {
		return fmt.Errorf("output %s: sync: %w", target, err)
	}
	if !exists {
		if err := os.Rename(tmp, target); err != nil {
			return fmt.Errorf("output %s: %w", target, err)
		}
		tmp = ""
		return syncDir(parent)
	}
	// tmp now holds the old content, removed by the deferred RemoveAll;
	// a kill before that leaves a leftover a later writer removes.
	if err := exchange(tmp, target); err != nil {
		return fmt.Errorf("output %s: replace: %w", target, err)
	}
	return syncDir(parent)
}

// syncTree fsyncs every directory under root (files are synced by their
// writers), so the entries survive a crash before the rename.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(path)
		}
		return nil
	})
}

// exchangeByRenames swaps directories a and b through a third name of the
// leftover form, so a kill between the renames leaves nothing a later
// writer would not remove; target is missing for the moment between them.
func exchangeByRenames(a, b string) error {
	aside, err := os.MkdirTemp(filepath.Dir(b), "."+filepath.Base(b)+tempInfix+"*")
	if err != nil {
		return err
	}
	// The name was reserved by making it; os.Rename will not replace a
	// directory, so it goes again (the caller's lock keeps it free).
	if err := os.Remove(aside); err != nil {
		return err
	}
	if err := os.Rename(b, aside); err != nil {
		return err
	}
	if err := os.Rename(a, b); err != nil {
		os.Rename(aside, b)
		return err
	}
	return os.Rename(aside, a)
}
