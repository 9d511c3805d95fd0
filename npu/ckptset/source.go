package ckptset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/mspipe/mspipe/npu/parallel"
	"github.com/mspipe/mspipe/npu/reshard"
)

// StrategyNames are the file names FindStrategy looks for in a set's
// directory, in order: the protobuf form, then the JSON form.
var StrategyNames = []string{"strategy.ckpt", "strategy.json"}

// StrategyDirName is the directory of per-stage strategy files (one per
// pipeline stage or per rank, as MindSpore writes them) FindStrategy looks
// for in a set's directory when it has no strategy file.
const StrategyDirName = "strategy"

// FindStrategy returns the strategy saved with the set at root (a file
// of StrategyNames, else a StrategyDirName directory of per-stage files,
// which parallel.ReadStrategies merges), or "" when there is none.
func FindStrategy(root string) (string, error) {
	for _, name := range append(slices.Clone(StrategyNames), StrategyDirName) {
		p := filepath.Join(root, name)
		st, err := os.Stat(p)
		switch {
		case err == nil && (st.Mode().IsRegular() || name == StrategyDirName && st.IsDir()):
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
	var sf *parallel.StrategyFile
	var err error
	if in.Strategy != "" {
		if sf, err = parallel.ReadStrategies(in.Strategy); err != nil {
			return nil, in, err
		}
	}
	if in.Root, in.Files, err = Files(args, prefix); err != nil {
		// A pipeline set saved with integrated_save: only the first rank
		// of each stage has a checkpoint, of its stage's whole tensors.
		if sf != nil && in.Root != "" && len(sf.Stages()) > 1 {
			if leads, lerr := FindStageLeads(in.Root, prefix, len(sf.Stages())); lerr == nil {
				in.Files = leads
				s, err := OpenWholeStages(leads, sf)
				if err != nil {
					return nil, in, fmt.Errorf("%s: %w", in.Strategy, err)
				}
				return s, in, nil
			}
		}
		return nil, in, err
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
