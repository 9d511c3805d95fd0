package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// cacheKeyInput is everything that determines a stage's outputs. It is
// hashed as canonical JSON (encoding/json sorts map keys).
type cacheKeyInput struct {
	Plugin    string            `json:"plugin"` // name, version and binary digest
	With      map[string]any    `json:"with"`
	Devices   int               `json:"devices"`
	RankTable string            `json:"rank_table,omitempty"` // content hash of the rank table file
	Env       map[string]string `json:"env,omitempty"`
	Inputs    map[string]string `json:"inputs,omitempty"` // "<stage>.<output>" -> content hash of upstream path outputs
}

func cacheKey(in cacheKeyInput) (string, error) {
	data, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// hashPath returns the SHA-256 of a file, or of a directory tree (relative
// names, modes and contents, in sorted order), so a path's identity is its
// content, not its name or mtime.
func hashPath(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if !st.IsDir() {
		if err := hashFile(h, path); err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	for _, f := range files {
		rel, _ := filepath.Rel(path, f)
		fmt.Fprintf(h, "%s\x00", filepath.ToSlash(rel))
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\x00%d\x00", n)
	return nil
}
