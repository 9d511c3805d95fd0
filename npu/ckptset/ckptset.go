package ckptset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/ckpt"
	"github.com/mspipe/mspipe/npu/reshard"
)

// ErrNotASet is wrapped when a directory holds no device{i}/ directories.
var ErrNotASet = errors.New("not a checkpoint set")

// RankDir returns the directory of rank's checkpoints in the set at root:
// root/device{rank}/ckpt_{rank}.
func RankDir(root string, rank int) string {
	return filepath.Join(root, fmt.Sprintf("device%d", rank), fmt.Sprintf("ckpt_%d", rank))
}

// FilePath returns where rank's checkpoint named name goes in the set at
// root.
func FilePath(root string, rank int, name string) string {
	return filepath.Join(RankDir(root, rank), name)
}

// Find returns the newest checkpoint of prefix ("" for MindSpore's default,
// CKP) of every rank of the set at root, in rank order. The ranks are the
// device{i} directories; they must be 0..N-1 with none missing, and each
// must hold a checkpoint in its ckpt_{i}/.
func Find(root, prefix string) ([]string, error) {
	n, err := countRanks(root)
	if err != nil {
		return nil, err
	}
	files := make([]string, n)
	for i := range files {
		f, err := ckpt.Latest(RankDir(root, i), prefix)
		if err != nil {
			return nil, fmt.Errorf("checkpoint set %s: rank %d: %w", root, i, err)
		}
		files[i] = f
	}
	return files, nil
}

// FindStageLeads returns the newest checkpoint of prefix of the first
// rank of each of the stages of the pipeline set at root, as a pipeline
// job saves with integrated_save: the first rank of each stage (rank s*D
// of K stages of D ranks) saves its stage's whole tensors, the others
// nothing. A first rank without a checkpoint, or another rank with one,
// is an error naming it.
func FindStageLeads(root, prefix string, stages int) ([]string, error) {
	n, err := countRanks(root)
	if err != nil {
		return nil, err
	}
	if stages < 2 || n%stages != 0 {
		return nil, fmt.Errorf("checkpoint set %s: %d ranks do not split into %d pipeline stages", root, n, stages)
	}
	per := n / stages
	var files []string
	for r := range n {
		f, err := ckpt.Latest(RankDir(root, r), prefix)
		none := errors.Is(err, ckpt.ErrNoCheckpoint) || errors.Is(err, fs.ErrNotExist)
		switch {
		case err != nil && !none:
			return nil, fmt.Errorf("checkpoint set %s: rank %d: %w", root, r, err)
		case r%per == 0 && none:
			return nil, fmt.Errorf("checkpoint set %s: rank %d, the first of pipeline stage %d: %w", root, r, r/per, err)
		case r%per != 0 && !none:
			return nil, fmt.Errorf("checkpoint set %s: rank %d holds %s, but only the first rank of each stage saves whole tensors (integrated_save); a set of per-rank slices needs every rank's", root, r, f)
		case r%per == 0:
			files = append(files, f)
		}
	}
	return files, nil
}

// countRanks returns the number of device{i} directories of the set at
// root, which must be device0 to device{n-1}.
func countRanks(root string) (int, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0, fmt.Errorf("checkpoint set %s: %w", root, err)
	}
	var ranks []int
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "device")
		if !ok || !e.IsDir() {
			continue
		}
		r, err := strconv.Atoi(n)
		if err != nil || r < 0 || strconv.Itoa(r) != n {
			continue // device_0, deviceX: not the layout's names
		}
		ranks = append(ranks, r)
	}
	if len(ranks) == 0 {
		return 0, fmt.Errorf("checkpoint set %s: no device{i}/ckpt_{i}/ directories: %w", root, ErrNotASet)
	}
	sort.Ints(ranks)
	for i, r := range ranks {
		if r != i {
			return 0, fmt.Errorf("checkpoint set %s: rank %d is missing (device%d/ absent, device%d/ present)", root, i, i, r)
		}
	}
	return len(ranks), nil
}

// RankFile returns the checkpoint rank starts from in the set at root,
// for npu/train's init:. A set written by a reshard (it has a manifest)
// gives the file its manifest lists, after refusing files it does not list
// (a stale CKP-9_9.ckpt beside it would otherwise be the newest) and a
// rank file whose size is not the manifest's; a training's own set gives
// the newest checkpoint of prefix in the rank's directory.
func RankFile(root string, rank int, prefix string) (string, error) {
	if _, err := os.Lstat(filepath.Join(root, reshard.ManifestName)); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return ckpt.Latest(RankDir(root, rank), prefix)
	}
	m, err := reshard.ReadManifest(root)
	if err != nil {
		return "", err
	}
	if rank >= len(m.Files) {
		return "", fmt.Errorf("%s: the set has %d ranks, there is none for rank %d", root, len(m.Files), rank)
	}
	if err := reshard.CheckListed(root, m); err != nil {
		return "", err
	}
	f := m.Files[rank]
	path, err := userfile.Within(root, filepath.FromSlash(f.Path))
	if err != nil {
		return "", fmt.Errorf("%s: manifest file %q: %w", root, f.Path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Size() != f.Bytes {
		return "", fmt.Errorf("%s: %d bytes, its set's %s says %d: %w", path, st.Size(), reshard.ManifestName, f.Bytes, reshard.ErrVerify)
	}
	return path, nil
}

// FileName returns the name of a file in a set written from a checkpoint
// named source: {prefix}-{epoch}_{step}.ckpt with the source's epoch and
// step when its name has them (so a retrain resumes the count), else
// {prefix}-1_1.ckpt.
func FileName(prefix, source string) string {
	if prefix == "" {
		prefix = ckpt.DefaultPrefix
	}
	if _, epoch, step, ok := ckpt.ParseFileName(filepath.Base(source)); ok {
		return ckpt.FileName(prefix, epoch, step)
	}
	return ckpt.FileName(prefix, 1, 1)
}

// WriteRank writes rank's checkpoint named name into the set at root
// (creating its directories), as MindSpore's save_checkpoint does by
// default (no crc_num trailer), and returns its path.
func WriteRank(root string, rank int, name string, tensors []ckpt.Tensor) (string, error) {
	path := FilePath(root, rank, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("rank %d: %w", rank, err)
	}
	if err := ckpt.Write(path, tensors, ckpt.WriteOptions{}); err != nil {
		return "", fmt.Errorf("rank %d: %w", rank, err)
	}
	return path, nil
}
