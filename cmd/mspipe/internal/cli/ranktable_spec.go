package cli

import (
	"github.com/mspipe/mspipe/internal/diag"
)

// checkRankTableForSpec validates a rank table named by a spec's cluster
// with the same rules as `mspipe ranktable validate`, returning its
// problems positioned in the rank table file.
func checkRankTableForSpec(path string) (int, diag.List, error) {
	t, problems, err := loadRankTable(path)
	if err != nil || t == nil {
		return 0, problems, err
	}
	return t.RankSize(), problems, nil
}
