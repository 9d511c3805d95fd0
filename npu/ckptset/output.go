package ckptset

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
)

// ErrInputOutput is wrapped when an output would be, hold, or lie inside
// one of the tool's inputs.
var ErrInputOutput = errors.New("refusing to write over an input")

// Paths lists everything in is read from: the set directory, the rank
// files, the strategy file and the manifest. Outputs must stay clear of
// all of them (CheckOutput).
func (in Input) Paths() []string {
	var out []string
	if in.Root != "" {
		out = append(out, in.Root)
		if in.Manifest {
			out = append(out, filepath.Join(in.Root, reshard.ManifestName))
		}
	}
	out = append(out, in.Files...)
	if in.Strategy != "" {
		out = append(out, in.Strategy)
	}
	return out
}

// CheckOutput refuses an output path that is one of inputs, holds one
// (a directory above it), or lies inside one (a set directory), through
// any spelling or symbolic link. It only reads, so a refusal leaves
// everything as it was.
func CheckOutput(out string, inputs []string) error {
	o, err := realPath(out)
	if err != nil {
		return fmt.Errorf("output %s: %w", out, err)
	}
	for _, in := range inputs {
		i, err := realPath(in)
		if err != nil {
			return fmt.Errorf("input %s: %w", in, err)
		}
		switch {
		case o == i:
			return fmt.Errorf("output %s is the input %s: %w", out, in, ErrInputOutput)
		case within(i, o):
			return fmt.Errorf("output %s holds the input %s: %w", out, in, ErrInputOutput)
		case within(o, i):
			return fmt.Errorf("output %s lies inside the input %s: %w", out, in, ErrInputOutput)
		}
	}
	return nil
}

// within reports whether path p lies strictly under directory dir.
func within(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, string(filepath.Separator))+string(filepath.Separator))
}

// realPath is p absolute with every link of its existing part resolved;
// the part that does not exist yet is appended as written.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for cur := abs; ; {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(append([]string{real}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs, nil
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}

// Reshard writes target's set to outDir: the target strategy file (layout,
// as strategy.ckpt; none when layout is nil), the engine's rank files and the manifest, which lists
// them all. The inputs (in.Paths) are checked before anything is written;
// the set is built in a fresh directory beside outDir that replaces it only
// once complete (atomicfile.ReplaceDir), so a failed run leaves the old
// content whole. An outDir holding anything is refused unless force says to
// replace it whole. One writer per outDir: a second one at the same time is
// refused (atomicfile.Lock), and what a killed one left is removed.
func Reshard(ctx context.Context, s *Set, in Input, target reshard.Target, layout *parallel.StrategyFile, outDir string, force bool, opt reshard.Options) (*reshard.Manifest, error) {
	if err := CheckOutput(outDir, in.Paths()); err != nil {
		return nil, err
	}
	// "." and ".." cannot be renamed; their absolute names can.
	if b := filepath.Base(filepath.Clean(outDir)); b == "." || b == ".." {
		abs, err := filepath.Abs(outDir)
		if err != nil {
			return nil, err
		}
		outDir = abs
	}
	if err := os.MkdirAll(filepath.Dir(outDir), 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	unlock, err := atomicfile.Lock(outDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := atomicfile.RemoveLeftovers(outDir); err != nil {
		return nil, err
	}
	var m *reshard.Manifest
	err = atomicfile.ReplaceDir(outDir, force, func(tmp string) error {
		// A nil layout (uneven slices, which no strategy file describes)
		// writes none.
		if layout != nil {
			if err := parallel.WriteStrategyFile(filepath.Join(tmp, StrategyNames[0]), layout, parallel.FormatProto); err != nil {
				return err
			}
			target.Strategy = StrategyNames[0]
		}
		var err error
		m, err = reshard.Run(ctx, s.Source, target, tmp, opt)
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Merge integrates the set into the one checkpoint out, with the manifest
// beside it. The inputs are checked before anything is written, and so are
// the targets (regular files or nothing); an existing out or manifest is
// refused unless force says to replace them. One writer per output
// directory (the manifest's lock); what a killed merge left is removed.
func Merge(ctx context.Context, s *Set, in Input, out string, force bool, opt reshard.Options) (*reshard.Manifest, error) {
	dir, name := filepath.Dir(out), filepath.Base(out)
	manifest := filepath.Join(dir, reshard.ManifestName)
	if name == reshard.ManifestName {
		return nil, fmt.Errorf("output %s: the manifest goes beside the checkpoint under that name; name the checkpoint otherwise", out)
	}
	for _, p := range []string{out, manifest} {
		if err := CheckOutput(p, in.Paths()); err != nil {
			return nil, err
		}
		if err := atomicfile.CheckTarget(p); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	unlock, err := atomicfile.Lock(manifest)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, p := range []string{out, manifest} {
		if err := atomicfile.RemoveLeftovers(p); err != nil {
			return nil, err
		}
		if _, err := os.Lstat(p); err == nil && !force {
			return nil, fmt.Errorf("output %s exists (an earlier merge or another set's): give --force to replace it: %w", p, atomicfile.ErrNotEmpty)
		}
	}
	return reshard.Merge(ctx, s.Source, dir, name, opt)
}
