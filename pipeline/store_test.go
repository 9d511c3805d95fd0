package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadStateRefusesCorruptFiles: every kind of damage to run.json is
// ErrCorruptState, with what is wrong.
func TestLoadStateRefusesCorruptFiles(t *testing.T) {
	const id = "20261124-120000-abcdef"
	good := `{"version":1,"id":"` + id + `","status":"failed","stages":{"a":{"status":"succeeded","uses":"work","cache_key":"k"}},"order":["a"]}`
	for _, tc := range []struct{ name, data, want string }{
		{"not json", "{", "unexpected EOF"},
		{"unknown field", strings.Replace(good, `"order"`, `"extra":1,"order"`, 1), "unknown field"},
		{"trailing data", good + "{}", "trailing data"},
		{"version", strings.Replace(good, `"version":1`, `"version":2`, 1), "version 2"},
		{"id", strings.Replace(good, id, "20261124-120000-000000", 1), "does not match"},
		{"run status", strings.Replace(good, `"status":"failed"`, `"status":"odd"`, 1), `unknown run status "odd"`},
		{"order", strings.Replace(good, `"order":["a"]`, `"order":[]`, 1), "order lists 0 stages"},
		{"stage missing", strings.Replace(good, `"order":["a"]`, `"order":["b"]`, 1), `stage "b" is in order`},
		{"stage status", strings.Replace(good, `"status":"succeeded"`, `"status":"odd"`, 1), `stage "a": unknown status`},
		{"no cache key", strings.Replace(good, `,"cache_key":"k"`, "", 1), "succeeded without a cache key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), id)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadState(dir)
			if !errors.Is(err, ErrCorruptState) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want corrupt state: %s", err, tc.want)
			}
		})
	}
	dir := filepath.Join(t.TempDir(), id)
	if _, err := LoadState(dir); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("missing run.json: %v", err)
	}
}

// TestStoreListsRunsNewestFirst: List skips what is not a run, reports a
// corrupt run beside the good ones; Latest is the newest; RunDir refuses
// ids that are not ids.
func TestStoreListsRunsNewestFirst(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	if _, err := s.Latest(); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("empty store: %v", err)
	}
	for _, id := range []string{"20261124-120000-aaaaaa", "20261124-130000-bbbbbb"} {
		dir := filepath.Join(s.Dir, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		st := &RunState{Version: stateVersion, ID: id, Status: StatusSucceeded, Stages: map[string]*StageState{}}
		if err := saveState(dir, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "20261124-140000-cccccc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}
	runs, errs := s.List()
	if len(runs) != 2 || runs[0].ID != "20261124-130000-bbbbbb" || len(errs) != 1 {
		t.Errorf("List: %d runs (first %v), errors %v", len(runs), runs, errs)
	}
	if id, err := s.Latest(); err != nil || id != "20261124-130000-bbbbbb" {
		t.Errorf("Latest = %s, %v", id, err)
	}
	if !runs[0].Terminal() || (&RunState{Status: StatusRunning}).Terminal() {
		t.Error("Terminal: succeeded is terminal, running is not")
	}
	for _, id := range []string{"../etc", "20261124-150000-dddddd"} {
		if _, err := s.RunDir(id); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("RunDir(%q) = %v", id, err)
		}
	}
}

// The cache lookups' view of the store reads a run.json again only when
// it was replaced, sees new runs and forgets removed ones.
func TestRunStatesRereadOnlyChangedRuns(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	save := func(id string, status Status) {
		t.Helper()
		dir := filepath.Join(s.Dir, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		st := &RunState{Version: stateVersion, ID: id, Status: status, Stages: map[string]*StageState{}}
		if err := saveState(dir, st); err != nil {
			t.Fatal(err)
		}
	}
	a, b := "20261124-120000-aaaaaa", "20261124-130000-bbbbbb"
	save(a, StatusSucceeded)
	rs := newRunStates(s)
	first := rs.list()
	if len(first) != 1 || first[0].ID != a {
		t.Fatalf("list = %v, want run %s", first, a)
	}
	if again := rs.list(); len(again) != 1 || again[0] != first[0] {
		t.Errorf("an unchanged run.json was read again")
	}
	save(b, StatusSucceeded)
	save(a, StatusFailed)
	runs := rs.list()
	if len(runs) != 2 || runs[0].ID != b || runs[1].ID != a || runs[1].Status != StatusFailed {
		t.Fatalf("after a new run and a changed one: %d runs %v", len(runs), runs)
	}
	if err := os.RemoveAll(filepath.Join(s.Dir, b)); err != nil {
		t.Fatal(err)
	}
	if runs := rs.list(); len(runs) != 1 || runs[0].ID != a {
		t.Errorf("after removing run %s: %v", b, runs)
	}
}
