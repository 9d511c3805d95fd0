package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunsLimitAndStatus: --status keeps the runs with that status,
// --limit the newest N of them; bad values are usage errors.
func TestRunsLimitAndStatus(t *testing.T) {
	runs := t.TempDir()
	for i, status := range []string{"succeeded", "failed", "succeeded", "failed", "succeeded"} {
		id := "20261124-12000" + string(rune('0'+i)) + "-abcdef"
		created := "2026-11-24T12:00:0" + string(rune('0'+i)) + "Z"
		st := map[string]any{
			"version": 1, "id": id, "pipeline": "p", "spec_file": "p.yaml", "spec_dir": runs,
			"params": map[string]any{}, "status": status, "created": created, "updated": created, "finished": created,
			"order": []string{}, "stages": map[string]any{},
		}
		data, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(runs, id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(runs, id, "run.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(args ...string) []string {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"runs", "--runs-dir", runs, "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("runs %v: exit %d: %s", args, code, errOut)
		}
		var list []struct{ ID, Status string }
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range list {
			got = append(got, r.ID[14:15]+r.Status[:1])
		}
		return got
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "4s 3f 2s 1f 0s"},
		{[]string{"--limit", "2"}, "4s 3f"},
		{[]string{"--status", "failed"}, "3f 1f"},
		{[]string{"--status", "succeeded", "--limit", "2"}, "4s 2s"},
		{[]string{"--status", "cancelled"}, ""},
	} {
		if got := strings.Join(ids(tc.args...), " "); got != tc.want {
			t.Errorf("runs %v: %q, want %q", tc.args, got, tc.want)
		}
	}
	for _, bad := range [][]string{{"--limit", "-1"}, {"--status", "done"}} {
		if code, _, errOut := runCLI(t, append([]string{"runs", "--runs-dir", runs}, bad...)...); code != 2 || errOut == "" {
			t.Errorf("runs %v: exit %d (%s), want 2", bad, code, errOut)
		}
	}
}
