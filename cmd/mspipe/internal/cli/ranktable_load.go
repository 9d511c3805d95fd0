package cli

import (
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/mspipe/mspipe/internal/diag"
	"github.com/mspipe/mspipe/npu/ranktable"
)

// loadedTable is a rank table parsed once, with the file it was read from.
type loadedTable struct {
	file     os.FileInfo
	table    *ranktable.RankTable
	problems diag.List
}

// loadedTables keeps the rank tables this process has parsed: validate,
// the engine's cluster size and plan each read the spec's table, and a
// 4,096-device table takes about 0.1 s of CPU to parse.
var loadedTables struct {
	sync.Mutex
	byPath map[string]loadedTable
}

// loadRankTable is ranktable.Load for the CLI's read-only uses, parsing
// a file once per process while it stays the same file (device, inode,
// size and modification time): a table an earlier stage rewrites is
// parsed again. Errors are never kept. Callers must not change the
// table; appending to the problems copies them (the slice is clipped).
func loadRankTable(path string) (*ranktable.RankTable, diag.List, error) {
	key, err := filepath.Abs(path)
	if err != nil {
		return ranktable.Load(path)
	}
	before, statErr := os.Stat(path)
	if statErr == nil {
		loadedTables.Lock()
		got, ok := loadedTables.byPath[key]
		loadedTables.Unlock()
		if ok && sameFile(got.file, before) {
			return got.table, slices.Clip(got.problems), nil
		}
	}
	t, problems, err := ranktable.Load(path)
	if err != nil || statErr != nil {
		return t, problems, err
	}
	// Keep it only if the file did not change while it was read.
	if after, err := os.Stat(path); err == nil && sameFile(before, after) {
		loadedTables.Lock()
		if loadedTables.byPath == nil {
			loadedTables.byPath = map[string]loadedTable{}
		}
		loadedTables.byPath[key] = loadedTable{file: after, table: t, problems: problems}
		loadedTables.Unlock()
	}
	return t, problems, nil
}

func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
