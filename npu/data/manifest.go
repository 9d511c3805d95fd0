package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mspipe/mspipe/internal/atomicfile"
)

// ManifestName is the manifest's file name in a prepared data set root.
const ManifestName = "manifest.json"

// ManifestFormat names the layout a manifest describes.
const ManifestFormat = "cifar-10-binary"

// ManifestVersion is the version of the manifest's JSON schema.
const ManifestVersion = 1

// Manifest describes a prepared data set root: every file with its size and
// SHA-256, record counts and class histograms, where the data came from, and
// the per-shard counts of MindSpore's sharding rule. It is written last and
// atomically, so a root with a manifest that verifies is complete.
type Manifest struct {
	Format          string      `json:"format"`
	ManifestVersion int         `json:"manifest_version"`
	Source          string      `json:"source"`                // SourceSynthetic or SourceCopy
	SourcePath      string      `json:"source_path,omitempty"` // the copied directory
	Generator       *Generator  `json:"generator,omitempty"`
	DataDir         string      `json:"data_dir"` // relative to the root
	Train           SplitInfo   `json:"train"`
	Test            SplitInfo   `json:"test"`
	Shards          *ShardsInfo `json:"shards,omitempty"`
	Files           []FileEntry `json:"files"` // sorted by path
}

// Sources of a prepared data set.
const (
	SourceSynthetic = "synthetic"
	SourceCopy      = "copy"
)

// Generator records how a synthetic data set was generated.
type Generator struct {
	Name    string      `json:"name"`
	Version int         `json:"version"`
	Config  SynthConfig `json:"config"`
}

// SplitInfo counts the records of a split.
type SplitInfo struct {
	Records        int             `json:"records"`
	ClassHistogram [NumClasses]int `json:"class_histogram"`
}

// ShardsInfo describes the per-shard files.
type ShardsInfo struct {
	NumShards int          `json:"num_shards"`
	Rule      string       `json:"rule"`
	Shards    []ShardEntry `json:"shards"`
}

// ShardRule names the sharding rule in manifests.
const ShardRule = "mindspore-distributed-sampler: ceil(n/num_shards) per shard, sample c of shard k = (num_shards*c+k) mod n"

// ShardEntry is one shard: its files and how many of their records are
// padding (repeats that wrap around to the start of the split).
type ShardEntry struct {
	ShardID      int    `json:"shard_id"`
	TrainFile    string `json:"train_file"`
	TrainRecords int    `json:"train_records"`
	TrainPadded  int    `json:"train_padded"`
	TestFile     string `json:"test_file"`
	TestRecords  int    `json:"test_records"`
	TestPadded   int    `json:"test_padded"`
}

// FileEntry is one file of the root.
type FileEntry struct {
	Path           string           `json:"path"` // slash-separated, relative to the root
	Bytes          int64            `json:"bytes"`
	SHA256         string           `json:"sha256"`
	Records        int              `json:"records,omitempty"`
	ClassHistogram *[NumClasses]int `json:"class_histogram,omitempty"`
}

// WriteManifest writes m as root/manifest.json atomically.
func WriteManifest(root string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write manifest %s: %w", filepath.Join(root, ManifestName), err)
	}
	return atomicfile.WriteFile(filepath.Join(root, ManifestName), append(b, '\n'), 0o644)
}

// ReadManifest reads root/manifest.json, refusing unknown fields, formats
// and versions.
func ReadManifest(root string) (*Manifest, error) {
	path := filepath.Join(root, ManifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("read manifest %s: %w: %w", path, ErrManifest, err)
	}
	if m.Format != ManifestFormat || m.ManifestVersion != ManifestVersion {
		return nil, fmt.Errorf("read manifest %s: %w: format %q version %d, want %q version %d",
			path, ErrManifest, m.Format, m.ManifestVersion, ManifestFormat, ManifestVersion)
	}
	for _, f := range m.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			return nil, fmt.Errorf("read manifest %s: %w: file path %q leaves the root", path, ErrManifest, f.Path)
		}
	}
	return &m, nil
}

// hashFile returns the size and hex SHA-256 of a file, streaming it.
func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

func hashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fileEntry reads a file once, hashing it and, for a .bin file, parsing its
// records for the count and histogram.
func fileEntry(root, rel string) (FileEntry, *Set, error) {
	path := filepath.Join(root, filepath.FromSlash(rel))
	b, err := os.ReadFile(path)
	if err != nil {
		return FileEntry{}, nil, fmt.Errorf("manifest: %w", err)
	}
	e := FileEntry{Path: rel, Bytes: int64(len(b)), SHA256: hashBytes(b)}
	if filepath.Ext(rel) != ".bin" {
		return e, nil, nil
	}
	set, err := ParseBatch(path, b)
	if err != nil {
		return FileEntry{}, nil, err
	}
	h := set.ClassHistogram()
	e.Records, e.ClassHistogram = set.Len(), &h
	return e, set, nil
}

// Verify re-hashes every file listed in root's manifest and compares sizes
// and SHA-256 sums; it also reports .bin files the manifest does not list,
// since a reader would pick them up. All problems are returned together,
// each wrapping ErrManifest.
func Verify(root string) (*Manifest, error) {
	m, err := ReadManifest(root)
	if err != nil {
		return nil, err
	}
	var problems []error
	listed := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		listed[f.Path] = true
		size, sum, err := hashFile(filepath.Join(root, filepath.FromSlash(f.Path)))
		switch {
		case errors.Is(err, os.ErrNotExist):
			problems = append(problems, fmt.Errorf("%s: %w: file is missing", f.Path, ErrManifest))
		case err != nil:
			problems = append(problems, fmt.Errorf("%s: %w", f.Path, err))
		case size != f.Bytes:
			problems = append(problems, fmt.Errorf("%s: %w: size %d bytes, manifest says %d", f.Path, ErrManifest, size, f.Bytes))
		case sum != f.SHA256:
			problems = append(problems, fmt.Errorf("%s: %w: sha256 %s, manifest says %s", f.Path, ErrManifest, sum, f.SHA256))
		}
	}
	for _, dir := range []string{m.DataDir, ShardsDirName} {
		entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dir)))
		if err != nil {
			continue // a listed file in it is reported missing above
		}
		for _, e := range entries {
			rel := dir + "/" + e.Name()
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".bin") && !listed[rel] {
				problems = append(problems, fmt.Errorf("%s: %w: file is not in the manifest", rel, ErrManifest))
			}
		}
	}
	if len(problems) > 0 {
		return m, fmt.Errorf("verify data set %s: %w", root, errors.Join(problems...))
	}
	return m, nil
}

func sortFiles(files []FileEntry) {
	slices.SortFunc(files, func(a, b FileEntry) int { return strings.Compare(a.Path, b.Path) })
}
