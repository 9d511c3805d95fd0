package cli

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLoadRankTableParsesOnceWhileTheFileStaysTheSame(t *testing.T) {
	seed, err := os.ReadFile(seedTables + "rank_table_8pcs.json")
	if err != nil {
		t.Fatal(err)
	}
	path := writeTable(t, t.TempDir(), "rank_table.json", string(seed))
	first, _, err := loadRankTable(path)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := loadRankTable(path)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Error("the same unchanged file was parsed twice")
	}

	// An earlier stage rewriting the table (here: a 2-device table put in
	// its place, as an atomic write does) must be seen.
	two, err := os.ReadFile(seedTables + "rank_table_2pcs.json")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(path), "next.json")
	if err := os.WriteFile(tmp, two, 0o644); err != nil {
		t.Fatal(err)
	}
	// A different mtime even where the file system's clock is coarse.
	if err := os.Chtimes(tmp, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	rewritten, _, err := loadRankTable(path)
	if err != nil {
		t.Fatal(err)
	}
	if rewritten == first || rewritten.RankSize() != 2 || first.RankSize() != 8 {
		t.Errorf("after the rewrite: %d devices (same table %v), want the new file's 2", rewritten.RankSize(), rewritten == first)
	}

	// A table that is gone is an error, not the parse kept from before.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadRankTable(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removed table: err %v, want not exist", err)
	}
}
