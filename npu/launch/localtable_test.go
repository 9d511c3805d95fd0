package launch

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mspipe/mspipe/npu/ranktable"
)

// Every device count cluster.devices accepts gets a valid local rank
// table: 1, 2, 4 or 8 on one host, whole 8-device hosts above (16 used to
// fail at run time, "16 devices per host: HCCL supports 1, 2, 4 or 8");
// other counts are refused.
func TestLocalRankTableForEveryAcceptedCount(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{1, 2, 4, 8, 16, 24, 64, 2032} {
		path, err := LocalRankTable(dir, n)
		if err != nil {
			t.Errorf("%d devices: %v", n, err)
			continue
		}
		if want := filepath.Join(dir, fmt.Sprintf("rank_table_%dpcs.json", n)); path != want {
			t.Errorf("path %s, want %s", path, want)
		}
		table, problems, err := ranktable.Load(path)
		if err != nil || problems.HasErrors() {
			t.Errorf("%d devices: %v %v", n, err, problems)
			continue
		}
		hosts := max(1, n/8)
		if table.RankSize() != n || len(table.ServerList) != hosts {
			t.Errorf("%d devices: %d ranks on %d hosts, want %d on %d", n, table.RankSize(), len(table.ServerList), n, hosts)
		}
	}
	for _, n := range []int{3, 12, 2040} {
		if _, err := LocalRankTable(dir, n); err == nil {
			t.Errorf("%d devices accepted", n)
		}
	}
}
