package ckptset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mspipe/mspipe/npu/ckpt"
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
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint set %s: %w", root, err)
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
		return nil, fmt.Errorf("checkpoint set %s: no device{i}/ckpt_{i}/ directories: %w", root, ErrNotASet)
	}
	sort.Ints(ranks)
	for i, r := range ranks {
		if r != i {
			return nil, fmt.Errorf("checkpoint set %s: rank %d is missing (device%d/ absent, device%d/ present)", root, i, i, r)
		}
	}
	files := make([]string, len(ranks))
	for i := range ranks {
		f, err := ckpt.Latest(RankDir(root, i), prefix)
		if err != nil {
			return nil, fmt.Errorf("checkpoint set %s: rank %d: %w", root, i, err)
		}
		files[i] = f
	}
	return files, nil
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
