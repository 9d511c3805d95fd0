package parallel

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// NamedStrategy is a strategy file and the name (its path) errors give it.
type NamedStrategy struct {
	Name string
	File *StrategyFile
}

// MaxStrategyFiles bounds how many strategy files one merge reads:
// MindSpore writes one per rank, and mspipe's ranks stop at 4096.
const MaxStrategyFiles = 4096

// MergeStrategies merges the strategy files of a pipeline-parallel job,
// as MindSpore's merge_pipeline_strategys does, into one file holding
// every stage's operators (each with its stage) and every stage's layouts.
//
// Each input is the file of one stage (its current_stage; every operator
// in it of that stage). MindSpore writes one per rank, so several files
// may claim the same stage: they must be identical. The stages must be
// 0 to K-1 with none missing, all on the same number of devices. A
// parameter in several stages' files (a weight stages share) must have the
// same layout in each; an operator likewise the same strategy. Errors name
// the files at fault. The result's ParamStages records which stages held
// each parameter; its CurrentStage is 0.
func MergeStrategies(files []NamedStrategy) (*StrategyFile, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no strategy files to merge", ErrStrategyFile)
	}
	if len(files) > MaxStrategyFiles {
		return nil, fmt.Errorf("%w: %d strategy files, more than %d", ErrStrategyFile, len(files), MaxStrategyFiles)
	}
	byStage := map[int]NamedStrategy{}
	for _, nf := range files {
		f := nf.File
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("strategy file %s: %w", nf.Name, err)
		}
		if len(f.OperatorStages) > 0 || len(f.ParamStages) > 0 {
			return nil, fmt.Errorf("%w: %s holds stages %v: it is already a merged file, give the per-stage files it was merged from", ErrStrategyFile, nf.Name, f.Stages())
		}
		first, dup := byStage[f.CurrentStage]
		if !dup {
			byStage[f.CurrentStage] = nf
			continue
		}
		if diff := strategyDifference(first.File, f); diff != "" {
			return nil, fmt.Errorf("%w: %s and %s both claim stage %d but differ (%s)", ErrStrategyFile, first.Name, nf.Name, f.CurrentStage, diff)
		}
	}
	stages := slices.Sorted(maps.Keys(byStage))
	for i, s := range stages {
		if s != i {
			return nil, fmt.Errorf("%w: stage %d missing: the files hold stages %v (%s); a pipeline's stages are 0 to K-1, give every stage's file",
				ErrStrategyFile, i, stages, stageFiles(byStage, stages))
		}
	}
	merged := &StrategyFile{Operators: map[string][][]int{}, Layouts: map[string]TensorLayout{}, ParamStages: map[string][]int{}}
	opFrom, layoutFrom := map[string]string{}, map[string]string{}
	devices, devicesFrom := 0, ""
	for _, s := range stages {
		nf := byStage[s]
		f := nf.File
		if d := f.Devices(); d > 0 {
			if devices == 0 {
				devices, devicesFrom = d, nf.Name
			} else if d != devices {
				return nil, fmt.Errorf("%w: %s (stage %d) lays its parameters on %d devices, %s on %d; every stage has the same number of devices",
					ErrLayout, nf.Name, s, d, devicesFrom, devices)
			}
		}
		for _, op := range slices.Sorted(maps.Keys(f.Operators)) {
			if prev, ok := merged.Operators[op]; ok {
				if !slices.EqualFunc(prev, f.Operators[op], slices.Equal) {
					return nil, fmt.Errorf("%w: operator %s has strategy %v in %s and %v in %s", ErrStrategyFile, op, prev, opFrom[op], f.Operators[op], nf.Name)
				}
				continue
			}
			merged.Operators[op] = f.Operators[op]
			opFrom[op] = nf.Name
			if s != 0 {
				if merged.OperatorStages == nil {
					merged.OperatorStages = map[string]int{}
				}
				merged.OperatorStages[op] = s
			}
		}
		for _, name := range slices.Sorted(maps.Keys(f.Layouts)) {
			l := f.Layouts[name]
			if prev, ok := merged.Layouts[name]; ok {
				if !sameTensorLayout(prev, l) {
					return nil, fmt.Errorf("%w: parameter %s has layout %s in %s and %s in %s", ErrStrategyFile, name, describeLayout(prev), layoutFrom[name], describeLayout(l), nf.Name)
				}
			} else {
				merged.Layouts[name] = l
				layoutFrom[name] = nf.Name
			}
			merged.ParamStages[name] = append(merged.ParamStages[name], s)
		}
	}
	if err := merged.Validate(); err != nil {
		return nil, fmt.Errorf("merged strategy: %w", err)
	}
	return merged, nil
}

func stageFiles(byStage map[int]NamedStrategy, stages []int) string {
	var parts []string
	for _, s := range stages {
		parts = append(parts, fmt.Sprintf("stage %d from %s", s, byStage[s].Name))
	}
	return strings.Join(parts, ", ")
}

// strategyDifference names the first difference between two files of the
// same stage, or "" when they are the same.
func strategyDifference(a, b *StrategyFile) string {
	for _, name := range slices.Sorted(maps.Keys(a.Layouts)) {
		lb, ok := b.Layouts[name]
		switch {
		case !ok:
			return "parameter " + name + " is only in the first"
		case !sameTensorLayout(a.Layouts[name], lb):
			return fmt.Sprintf("parameter %s: %s against %s", name, describeLayout(a.Layouts[name]), describeLayout(lb))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.Layouts)) {
		if _, ok := a.Layouts[name]; !ok {
			return "parameter " + name + " is only in the second"
		}
	}
	for _, op := range slices.Sorted(maps.Keys(a.Operators)) {
		sb, ok := b.Operators[op]
		switch {
		case !ok:
			return "operator " + op + " is only in the first"
		case !slices.EqualFunc(a.Operators[op], sb, slices.Equal):
			return fmt.Sprintf("operator %s: strategy %v against %v", op, a.Operators[op], sb)
		}
	}
	for _, op := range slices.Sorted(maps.Keys(b.Operators)) {
		if _, ok := a.Operators[op]; !ok {
			return "operator " + op + " is only in the second"
		}
	}
	return ""
}

// sameTensorLayout compares two layouts; a shape only one of them records
// (the protobuf form has none) is no difference.
func sameTensorLayout(a, b TensorLayout) bool {
	if a.Shape != nil && b.Shape != nil && !slices.Equal(a.Shape, b.Shape) {
		return false
	}
	return slices.Equal(a.DeviceMatrix, b.DeviceMatrix) && slices.Equal(a.TensorMap, b.TensorMap) &&
		slices.Equal(a.ParamSplitShape, b.ParamSplitShape) && slices.Equal(a.IndicesOffset, b.IndicesOffset) &&
		a.Field == b.Field && a.OptWeightShardStep == b.OptWeightShardStep && a.OptWeightShardSize == b.OptWeightShardSize
}

func describeLayout(l TensorLayout) string {
	s := fmt.Sprintf("dev_matrix %v tensor_map %v", l.DeviceMatrix, l.TensorMap)
	if l.OptWeightShardSize != 0 || l.OptWeightShardStep != 0 {
		s += fmt.Sprintf(" opt_weight_shard_step %d size %d", l.OptWeightShardStep, l.OptWeightShardSize)
	}
	if len(l.ParamSplitShape) > 0 {
		s += fmt.Sprintf(" param_split_shape %v", l.ParamSplitShape)
	}
	if l.Field != 0 {
		s += fmt.Sprintf(" field %d", l.Field)
	}
	if l.Shape != nil {
		s += fmt.Sprintf(" tensor_shape %v", l.Shape)
	}
	return s
}

// ReadStrategies reads the strategy of a job from paths: a directory
// stands for every regular file in it (not hidden, not in
// subdirectories: MindSpore's merge_pipeline_strategys reads such a
// directory). One file in all is read as ReadStrategyFile reads it (a
// merged file, or a job without pipeline stages); several are the
// per-stage files of a pipeline job, merged in memory by MergeStrategies.
// Errors name the file at fault.
func ReadStrategies(paths ...string) (*StrategyFile, error) {
	files, err := StrategyPaths(paths...)
	if err != nil {
		return nil, err
	}
	if len(files) == 1 {
		return ReadStrategyFile(files[0])
	}
	return MergeStrategyFiles(files...)
}

// MergeStrategyFiles reads the strategy files at paths (files, not
// directories) and merges them with MergeStrategies, even when there is
// only one.
func MergeStrategyFiles(paths ...string) (*StrategyFile, error) {
	named := make([]NamedStrategy, 0, len(paths))
	for _, p := range paths {
		f, err := ReadStrategyFile(p)
		if err != nil {
			return nil, err
		}
		named = append(named, NamedStrategy{Name: p, File: f})
	}
	return MergeStrategies(named)
}

// StrategyPaths expands paths as ReadStrategies does into the strategy
// files to read, in name order within each directory. A directory with no
// files, an entry that is neither a regular file nor a directory, and more
// than MaxStrategyFiles files are errors.
func StrategyPaths(paths ...string) ([]string, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no strategy file given", ErrStrategyFile)
	}
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("read strategy file: %w", err)
		}
		if !st.IsDir() {
			if !st.Mode().IsRegular() {
				return nil, fmt.Errorf("read strategy file %s: not a regular file", p)
			}
			out = append(out, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("read strategy directory: %w", err)
		}
		found := 0
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
				continue
			}
			full := filepath.Join(p, e.Name())
			info, err := os.Stat(full)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("read strategy directory %s: %w", p, err)
			}
			if err != nil || !info.Mode().IsRegular() {
				return nil, fmt.Errorf("read strategy directory %s: %s is not a regular file", p, e.Name())
			}
			out = append(out, full)
			found++
			if len(out) > MaxStrategyFiles {
				return nil, fmt.Errorf("%w: more than %d strategy files in %s", ErrStrategyFile, MaxStrategyFiles, strings.Join(paths, ", "))
			}
		}
		if found == 0 {
			return nil, fmt.Errorf("%w: directory %s holds no strategy file", ErrStrategyFile, p)
		}
	}
	if len(out) > MaxStrategyFiles {
		return nil, fmt.Errorf("%w: %d strategy files, more than %d", ErrStrategyFile, len(out), MaxStrategyFiles)
	}
	return out, nil
}
