package userfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/internal/bytesize"
)

var (
	// ErrNotRegular is wrapped when a path names something other than a
	// regular file: a directory, device, FIFO or socket.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge is wrapped when a file is larger than the caller's limit.
	ErrTooLarge = errors.New("file too large")
	// ErrOutside is wrapped when a path leaves the directory it must stay in.
	ErrOutside = errors.New("outside the directory")
)

// chunk is how much is read between two looks at the context.
const chunk = 1 << 20

// Open opens path for reading when it is a regular file. A FIFO is opened
// without blocking (a plain open would wait for a writer forever) and then
// refused like any other special file; the check is made on the opened
// file, so a path swapped after a stat cannot slip through.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("is %s, %w", kind(info.Mode()), ErrNotRegular)
	}
	if err := clearNonblock(f); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// kind names a file mode for error messages.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "mode " + m.String()
}

// ReadFile returns the content of the regular file at path, refusing files
// larger than limit bytes (limit <= 0: no limit) and stopping when ctx is
// done.
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	f, info, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if limit > 0 && info.Size() > limit {
		return nil, tooLarge(info.Size(), limit)
	}
	// The size can change after the stat: never read past limit+1.
	max := info.Size() + 1
	if limit > 0 {
		max = min(max, limit+1)
	}
	var buf strings.Builder
	buf.Grow(int(min(info.Size(), max)))
	n, err := Copy(ctx, &buf, io.LimitReader(f, max))
	if err != nil {
		return nil, err
	}
	if limit > 0 && n > limit {
		return nil, tooLarge(n, limit)
	}
	return []byte(buf.String()), nil
}

func tooLarge(size, limit int64) error {
	return fmt.Errorf("%w: %s, the limit is %s", ErrTooLarge, bytesize.Format(size), bytesize.Format(limit))
}

// Copy copies r to w in chunks, giving up with ctx's error when ctx is
// done between two chunks.
func Copy(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 64<<10)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := io.CopyBuffer(w, io.LimitReader(r, chunk), buf)
		total += n
		if err != nil {
			return total, err
		}
		if n < chunk {
			return total, nil
		}
	}
}

// Relative checks, without looking at the file system, that rel names a
// path inside whatever directory it will be joined to: not absolute, no
// ".." that climbs out. The error wraps ErrOutside; Within adds the
// directory's name. Validation uses it where the directory is not known yet.
func Relative(rel string) error {
	if filepath.IsAbs(rel) {
		return fmt.Errorf("%s is absolute, %w", rel, ErrOutside)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s climbs %w", rel, ErrOutside)
	}
	return nil
}

// Within returns the path rel names inside root, refusing one that leaves
// root: an absolute path, a ".." that climbs out, or a symbolic link (in
// any component that exists) that points outside. root itself must exist.
func Within(root, rel string) (string, error) {
	if err := Relative(rel); err != nil {
		return "", fmt.Errorf("%w %s", err, root)
	}
	clean := filepath.Clean(rel)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	joined := filepath.Join(root, clean)
	real, err := evalExisting(joined)
	if err != nil {
		return "", err
	}
	if !inside(realRoot, real) {
		return "", fmt.Errorf("%s resolves to %s, %w %s", rel, real, ErrOutside, root)
	}
	return joined, nil
}

// maxLinks bounds the dangling links evalExisting follows, as the kernel
// bounds a path's links (ELOOP).
const maxLinks = 40

// WritableWithin is Within for a path that is about to be written: a file,
// or a directory that files will be written into. When it is an existing
// directory, every symbolic link under it must also resolve inside root,
// since a write through one would land where it points. Nothing is
// followed or created while checking.
func WritableWithin(root, rel string) (string, error) {
	path, err := Within(root, rel)
	if err != nil {
		return "", err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	info, err := os.Lstat(path)
	if err != nil || !info.IsDir() {
		return path, nil // absent, or a file: Within has checked where it leads
	}
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		real, err := evalExisting(p)
		if err != nil {
			return err
		}
		if !inside(realRoot, real) {
			name, _ := filepath.Rel(root, p)
			return fmt.Errorf("%s is a symbolic link to %s, %w %s", name, real, ErrOutside, root)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return path, nil
}

// inside tells whether the resolved path real is root or under it.
func inside(realRoot, real string) bool {
	r, err := filepath.Rel(realRoot, real)
	return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
}

// evalExisting resolves symbolic links in the longest existing prefix of
// path and appends the rest unchanged. A dangling link is followed too:
// creating the file it names would write where it points.
func evalExisting(path string) (string, error) {
	return evalExistingDepth(path, 0)
}

func evalExistingDepth(path string, links int) (string, error) {
	rest := ""
	for p := path; ; {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if target, lerr := os.Readlink(p); lerr == nil {
			if links >= maxLinks {
				return "", fmt.Errorf("%s: too many levels of symbolic links", path)
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			return evalExistingDepth(filepath.Join(target, rest), links+1)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
