// Package atomicfile writes files so that a reader sees either the old
// content or the complete new content, never a torn write: the data goes to
// a temporary file in the same directory, is fsynced, then renamed over the
// target, and the directory is fsynced so the rename survives a crash.
//
// A target that exists and is not a regular file (a device, a FIFO, a
// socket, a directory) is refused: the rename would replace the node
// itself, so writing to /dev/full would swap the system's device for a
// regular file.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/internal/userfile"
)

// ErrNotRegular is wrapped when a target exists and is not a regular file.
// It is userfile.ErrNotRegular, so callers can tell "cannot use this path"
// from other failures the same way for reads and writes.
var ErrNotRegular = userfile.ErrNotRegular

// CheckTarget returns an error naming path and what it is when path exists
// (following links) and is not a regular file; nil when it is a regular
// file or does not exist.
func CheckTarget(path string) error {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("write %s: %w", path, err)
	case !info.Mode().IsRegular():
		return fmt.Errorf("write %s: it is %s, not a regular file: refusing to replace it: %w", path, userfile.Kind(info.Mode()), ErrNotRegular)
	}
	return nil
}

// tempInfix separates the target's name from the random digits in the name
// of a temporary file: .{name}.tmp-{digits}.
const tempInfix = ".tmp-"

// WriteFile atomically replaces path with data, created with mode perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write atomically replaces path with whatever fill writes. If fill returns
// an error, the target is left untouched and the temporary file is removed.
// A target that is not a regular file is refused before anything is
// written (see CheckTarget), and again just before the rename.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) (err error) {
	if err := CheckTarget(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+tempInfix+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = fill(tmp); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// fill may have taken long: a node made meanwhile is not replaced either.
	if err = CheckTarget(path); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. Some file systems refuse fsync on a
// directory; that is not an error worth failing a write for.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	_ = d.Sync()
	return nil
}

// Leftovers lists the temporary files in dir of writes whose process died
// before the rename (a killed write; a failed one removes its own), for
// the targets whose base name wanted accepts. Nothing reads them, but each
// holds the space of a whole file. Removing one is safe only when no
// process is writing that target now.
func Leftovers(dir string, wanted func(target string) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list temporary files: %w", err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		i := strings.LastIndex(name, tempInfix)
		if !strings.HasPrefix(name, ".") || i < 1 || !e.Type().IsRegular() || !allDigits(name[i+len(tempInfix):]) {
			continue
		}
		if wanted(name[1:i]) {
			out = append(out, filepath.Join(dir, name))
		}
	}
	return out, nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
