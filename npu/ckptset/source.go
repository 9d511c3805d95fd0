package ckptset

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
)

// StrategyNames are the file names FindStrategy looks for in a set's
// directory, in order: the protobuf form, then the JSON form.
var StrategyNames = []string{"strategy.ckpt", "strategy.json"}

// FindStrategy returns the strategy file saved with the set at root, or ""
// when there is none.
func FindStrategy(root string) (string, error) {
	for _, name := range StrategyNames {
		p := filepath.Join(root, name)
		st, err := os.Stat(p)
		switch {
		case err == nil && st.Mode().IsRegular():
			return p, nil
		case err == nil:
			return "", fmt.Errorf("%s is not a regular file", p)
		case !errors.Is(err, fs.ErrNotExist):
			return "", err
		}
	}
	return "", nil
}

// Input is what a tool was given to read: a set directory, a reshard
// output directory (with a manifest), or rank files.
type Input struct {
	Root     string // the directory, "" when files were given
	Files    []string
	Strategy string // the strategy file used, "" for none
	Manifest bool   // placements came from a reshard manifest
}

// Load opens the set args name. A single directory is a reshard output
// when it holds a manifest (placements from it), else a device{i}/ckpt_{i}/
// set whose newest checkpoints of prefix are read; other args are rank files
// in rank order (one file: an integrated checkpoint). The layout comes from
// strategy when given, else from the set's own strategy file
// (FindStrategy), else every tensor is replicated.
func Load(args []string, prefix, strategy string) (*Set, Input, error) {
	in := Input{Strategy: strategy}
	if len(args) == 0 {
		return nil, in, fmt.Errorf("no checkpoint set given")
	}
	if st, err := os.Stat(args[0]); err == nil && st.IsDir() && len(args) == 1 {
		in.Root = args[0]
		if _, err := os.Stat(filepath.Join(in.Root, reshard.ManifestName)); err == nil && strategy == "" {
			m, err := reshard.ReadManifest(in.Root)
			if err != nil {
				return nil, in, err
			}
			src := m.Source(in.Root)
			in.Files, in.Manifest = src.Files, true
			s, err := Open(src.Files, nil)
			if err != nil {
				return nil, in, err
			}
			s.Source.Placements = src.Placements
			for name, p := range src.Placements {
				s.Shapes[name] = p.Shape
			}
			return s, in, nil
		}
		if strategy == "" {
			if in.Strategy, err = FindStrategy(in.Root); err != nil {
				return nil, in, err
			}
		}
	}
	var err error
	if in.Root, in.Files, err = Files(args, prefix); err != nil {
		return nil, in, err
	}
	var sf *parallel.StrategyFile
	if in.Strategy != "" {
		if sf, err = parallel.ReadStrategyFile(in.Strategy); err != nil {
			return nil, in, err
		}
	}
	s, err := Open(in.Files, sf)
	if err != nil && in.Strategy != "" {
		return nil, in, fmt.Errorf("%s: %w", in.Strategy, err)
	}
	return s, in, err
}

// Files returns the rank files args name: the newest checkpoint of prefix
// of every rank of one set directory, or the files themselves in rank
// order; root is the directory, "" for files.
func Files(args []string, prefix string) (root string, files []string, err error) {
	if len(args) == 0 {
		return "", nil, fmt.Errorf("no checkpoint set given")
	}
	if len(args) == 1 {
		if st, err := os.Stat(args[0]); err == nil && st.IsDir() {
			files, err := Find(args[0], prefix)
			return args[0], files, err
		}
	}
	for _, a := range args {
		if st, err := os.Stat(a); err != nil {
			return "", nil, err
		} else if st.IsDir() {
			return "", nil, fmt.Errorf("%s is a directory: give one set directory, or rank files", a)
		}
	}
	return "", args, nil
}

// TargetFiles names every target rank's file, relative to the output
// directory, in the device{i}/ckpt_{i}/ layout npu/train's init: reads:
// {prefix}-{epoch}_{step}.ckpt with the epoch and step of source's name.
func TargetFiles(ranks int, prefix, source string) []string {
	name := FileName(prefix, source)
	files := make([]string, ranks)
	for r := range files {
		files[r] = filepath.ToSlash(FilePath("", r, name))
	}
	return files
}

// Reshard writes target's set into outDir: the target strategy file
// (layout, as strategy.ckpt) first, then the engine's rank files and
// manifest. The manifest is written last, so a set is complete only when
// all of it is there; on error the strategy file written here is removed
// again. A nil layout (uneven slices, which no strategy file describes)
// writes none and removes one an earlier run left.
func Reshard(ctx context.Context, s *Set, target reshard.Target, layout *parallel.StrategyFile, outDir string, opt reshard.Options) (*reshard.Manifest, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	strategy := filepath.Join(outDir, StrategyNames[0])
	if layout == nil {
		for _, name := range StrategyNames {
			if err := os.Remove(filepath.Join(outDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("remove the earlier strategy file: %w", err)
			}
		}
	} else if err := parallel.WriteStrategyFile(strategy, layout, parallel.FormatProto); err != nil {
		return nil, err
	}
	m, err := reshard.Run(ctx, s.Source, target, outDir, opt)
	if err != nil {
		os.Remove(strategy)
		return nil, err
	}
	return m, nil
}
