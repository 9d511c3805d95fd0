package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mspipe/mspipe/internal/atomicfile"
)

// ShardsDirName is the directory of per-shard files in a prepared root.
const ShardsDirName = "shards"

// MaxShards bounds the shard count of Prepare and WriteShards.
const MaxShards = 4096

// PrepareOptions says what Prepare writes.
type PrepareOptions struct {
	// Source is SourceSynthetic, or the path of a real cifar-10-batches-bin
	// directory (or of a directory that contains one) to validate and copy.
	Source string
	// Synth configures the synthetic data set.
	Synth SynthConfig
	// NumShards > 0 also writes per-shard files (see WriteShards).
	NumShards int
}

// Prepare writes a complete data set root for the cifar/prepare stage:
//
//	root/cifar-10-batches-bin/  data_batch_1..5.bin, test_batch.bin, batches.meta.txt
//	root/shards/                train_shard_K_of_N.bin, test_shard_K_of_N.bin (NumShards > 0)
//	root/manifest.json          written last
//
// root is an output directory: its cifar-10-batches-bin and shards
// directories are replaced. Every file is written atomically, and the old
// manifest is removed first, so a root interrupted half-way has no manifest
// and fails Verify.
func Prepare(ctx context.Context, root string, opts PrepareOptions) (*Manifest, error) {
	if opts.NumShards < 0 || opts.NumShards > MaxShards {
		return nil, fmt.Errorf("prepare %s: %w: num_shards %d must be in [0, %d]", root, ErrConfig, opts.NumShards, MaxShards)
	}
	if opts.Source == "" {
		return nil, fmt.Errorf("prepare %s: %w: no source (want %q or a cifar-10-batches-bin path)", root, ErrConfig, SourceSynthetic)
	}
	if err := mkdirAll(root); err != nil {
		return nil, err
	}
	if err := os.Remove(filepath.Join(root, ManifestName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("prepare %s: %w", root, err)
	}
	dataDir := filepath.Join(root, DataDirName)
	m := &Manifest{Format: ManifestFormat, ManifestVersion: ManifestVersion, DataDir: DataDirName}
	if opts.Source == SourceSynthetic {
		if err := opts.Synth.validate(); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", root, err)
		}
		if err := os.RemoveAll(dataDir); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", root, err)
		}
		if err := WriteSynthetic(ctx, dataDir, opts.Synth); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", root, err)
		}
		m.Source = SourceSynthetic
		m.Generator = &Generator{Name: GeneratorName, Version: GeneratorVersion, Config: opts.Synth}
	} else {
		src, err := CopyDataset(ctx, opts.Source, dataDir)
		if err != nil {
			return nil, fmt.Errorf("prepare %s: %w", root, err)
		}
		m.Source, m.SourcePath = SourceCopy, src
	}
	if err := os.RemoveAll(filepath.Join(root, ShardsDirName)); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", root, err)
	}
	if opts.NumShards > 0 {
		shards, err := WriteShards(ctx, root, opts.NumShards)
		if err != nil {
			return nil, fmt.Errorf("prepare %s: %w", root, err)
		}
		m.Shards = shards
	}
	if err := describeFiles(root, m); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", root, err)
	}
	if err := WriteManifest(root, m); err != nil {
		return nil, err
	}
	return m, nil
}

// describeFiles fills m.Files, m.Train and m.Test by reading back every file
// of the data and shard directories.
func describeFiles(root string, m *Manifest) error {
	m.Files = m.Files[:0]
	for _, dir := range []string{DataDirName, ShardsDirName} {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			entry, set, err := fileEntry(root, dir+"/"+e.Name())
			if err != nil {
				return err
			}
			m.Files = append(m.Files, entry)
			if dir != DataDirName || set == nil {
				continue
			}
			split := &m.Test
			if strings.Contains(e.Name(), "data_batch") {
				split = &m.Train
			} else if !strings.Contains(e.Name(), "test_batch") {
				continue
			}
			split.Records += set.Len()
			for c, k := range set.ClassHistogram() {
				split.ClassHistogram[c] += k
			}
		}
	}
	sortFiles(m.Files)
	return nil
}

// CopyDataset validates the real data set at src (a cifar-10-batches-bin
// directory, or a directory containing one) by parsing every batch file,
// then copies the batch files and batches.meta.txt (if present) into dst
// atomically. It returns the directory it copied from. Copying a directory
// onto itself only validates it.
func CopyDataset(ctx context.Context, src, dst string) (string, error) {
	if st, err := os.Stat(filepath.Join(src, DataDirName)); err == nil && st.IsDir() {
		src = filepath.Join(src, DataDirName)
	}
	set, err := ReadDir(src, SplitAll)
	if err != nil {
		return "", err
	}
	if same, err := sameDir(src, dst); err != nil {
		return "", err
	} else if same {
		return src, nil
	}
	if err := os.RemoveAll(dst); err != nil {
		return "", fmt.Errorf("copy cifar-10 to %s: %w", dst, err)
	}
	if err := mkdirAll(dst); err != nil {
		return "", err
	}
	raw := set.Bytes()
	for _, f := range set.Files() {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		part := raw[f.First*RecordBytes : (f.First+f.Count)*RecordBytes]
		if err := atomicfile.WriteFile(filepath.Join(dst, f.Name), part, 0o644); err != nil {
			return "", err
		}
	}
	meta, err := os.ReadFile(filepath.Join(src, MetaFileName))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return src, writeMeta(dst)
	case err != nil:
		return "", fmt.Errorf("copy cifar-10 %s: %w", src, err)
	}
	return src, atomicfile.WriteFile(filepath.Join(dst, MetaFileName), meta, 0o644)
}

func sameDir(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

// ShardFileName is the name of a per-shard file, e.g. train_shard_3_of_8.bin.
func ShardFileName(split Split, shardID, numShards int) string {
	return fmt.Sprintf("%s_shard_%d_of_%d.bin", split, shardID, numShards)
}

// WriteShards reads root/cifar-10-batches-bin and writes, for each of
// numShards shards, the train and test records that shard reads with a
// sequential (unshuffled) sampler, in read order, into root/shards/. Each
// shard file holds ceil(n/numShards) records; the last positions of some
// shards wrap around to the start of the split (see ShardIndices). With a
// shuffling sampler the assignment changes every epoch, so training reads
// the full data set and shards it on the fly; the shard files serve
// per-device loading without shuffling and inspection.
func WriteShards(ctx context.Context, root string, numShards int) (*ShardsInfo, error) {
	if numShards < 1 || numShards > MaxShards {
		return nil, fmt.Errorf("write shards: %w: num_shards %d must be in [1, %d]", ErrConfig, numShards, MaxShards)
	}
	dataDir := filepath.Join(root, DataDirName)
	train, err := ReadDir(dataDir, SplitTrain)
	if err != nil {
		return nil, err
	}
	test, err := ReadDir(dataDir, SplitTest)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, ShardsDirName)
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	info := &ShardsInfo{NumShards: numShards, Rule: ShardRule}
	var indices []int
	for k := range numShards {
		e := ShardEntry{ShardID: k}
		for _, part := range []struct {
			split           Split
			set             *Set
			file            *string
			records, padded *int
		}{
			{SplitTrain, train, &e.TrainFile, &e.TrainRecords, &e.TrainPadded},
			{SplitTest, test, &e.TestFile, &e.TestRecords, &e.TestPadded},
		} {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			n := part.set.Len()
			if indices, err = ShardIndices(indices, n, numShards, k, nil); err != nil {
				return nil, fmt.Errorf("write shards: %w", err)
			}
			name := ShardFileName(part.split, k, numShards)
			if err := atomicfile.Write(filepath.Join(dir, name), 0o644, func(w io.Writer) error {
				_, err := w.Write(part.set.Select(indices).Bytes())
				return err
			}); err != nil {
				return nil, err
			}
			*part.file = ShardsDirName + "/" + name
			*part.records = len(indices)
			*part.padded = paddedCount(n, numShards, k)
		}
		info.Shards = append(info.Shards, e)
	}
	return info, nil
}

// paddedCount is how many of shard k's positions num_shards*c+k reach past
// n and wrap around.
func paddedCount(n, numShards, k int) int {
	padded := 0
	for c := range ShardSize(n, numShards) {
		if numShards*c+k >= n {
			padded++
		}
	}
	return padded
}

func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	return nil
}
